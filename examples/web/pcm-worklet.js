// AudioWorklet processor: microphone float32 at the context's rate -> 16-bit PCM mono at
// 24 kHz (the OpenAI realtime `audio/pcm` format), posted to the page in ~100 ms chunks.
//
// Resampling runs here because AudioContexts at a custom rate cannot take a microphone in
// every browser. Each output sample averages the input samples it spans (a box filter), a
// cheap guard against aliasing when decimating 48 kHz -> 24 kHz.

const TARGET_RATE = 24000; // Hz
const CHUNK_SAMPLES = 2400; // 100 ms at 24 kHz

class PcmCaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.ratio = sampleRate / TARGET_RATE; // input samples per output sample
    this.acc = 0; // sum of input samples in the current output window
    this.accCount = 0; // how many are summed
    this.pos = 0; // input samples consumed toward the current output sample (fractional budget)
    this.out = new Int16Array(CHUNK_SAMPLES);
    this.outLen = 0;
    this.last = 0; // last output value, repeated when upsampling
    this.port.onmessage = (event) => {
      if (event.data === "flush") this.flush();
    };
  }

  flush() {
    if (this.outLen > 0) {
      const chunk = this.out.slice(0, this.outLen);
      this.port.postMessage(chunk.buffer, [chunk.buffer]);
      this.outLen = 0;
    }
  }

  push(value) {
    const clamped = Math.max(-1, Math.min(1, value));
    this.out[this.outLen++] = clamped < 0 ? clamped * 0x8000 : clamped * 0x7fff;
    if (this.outLen === CHUNK_SAMPLES) this.flush();
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const channels = input.length;
    const frames = input[0].length;
    for (let i = 0; i < frames; i++) {
      let mono = 0;
      for (let c = 0; c < channels; c++) mono += input[c][i];
      this.acc += mono / channels;
      this.accCount += 1;
      this.pos += 1;
      // Below 24 kHz input (ratio < 1) one input sample yields several outputs (sample-and-hold).
      while (this.pos >= this.ratio) {
        if (this.accCount > 0) this.last = this.acc / this.accCount;
        this.push(this.last);
        this.pos -= this.ratio;
        this.acc = 0;
        this.accCount = 0;
      }
    }
    return true;
  }
}

registerProcessor("pcm-capture", PcmCaptureProcessor);
