// OASR browser demo: microphone -> /v1/realtime (OpenAI realtime transcription protocol)
// and file upload -> /v1/audio/transcriptions (verbose_json with word timings).
//
// The page is served by the app under /demo/, so the API lives one level up. `?server=URL`
// points it at another OASR server instead (that server must allow this page's origin via
// OASR_CORS_ALLOW_ORIGIN).
//
// The microphone never needs the API key: it opens /v1/realtime with an ephemeral client
// secret (`ek_...`, one session each) that a backend holding the key minted with
// POST /v1/realtime/client_secrets. The page takes one from `?client_secret=`, or asks
// `?token_url=URL` (your backend; it answers OpenAI's shape, {"value": ...}) for a fresh one
// at each Start. A dropped connection is resumed (docs/streaming.md#resumable-sessions):
// the page reconnects with the session's resume token and re-sends the audio the server lacks.

const SAMPLE_RATE = 24000; // Hz, what pcm-worklet.js produces and session.update declares
const FINAL_WAIT_MS = 5000; // after Stop, how long to wait for the last final transcript
const RESUME_KEEP_S = 30; // audio kept for re-sending after a reconnect (the server's default grace)
const RESUME_ATTEMPTS = 5;
const RESUME_BACKOFF_MS = 500; // before the second attempt, doubled after each failed one

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

function apiBase() {
  const override = params.get("server");
  if (override) return new URL(override.endsWith("/") ? override : override + "/");
  // /demo, /demo/, /demo/index.html (also behind a path prefix) -> the prefix root.
  const root = location.pathname.replace(/\/demo(\/[^/]*)?$/, "/");
  return new URL(root, location.origin);
}

function apiKey() {
  return $("api-key").value.trim();
}

function setStatus(element, text, isError = false) {
  element.textContent = text;
  element.classList.toggle("error", isError);
}

async function servedModel() {
  try {
    const response = await fetch(new URL("v1/models", apiBase()), { headers: authHeaders() });
    if (!response.ok) return null;
    const body = await response.json();
    return body.data && body.data.length ? body.data[0].id : null;
  } catch {
    return null;
  }
}

function authHeaders() {
  return apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
}

// A client secret for one live session: typed or given in the URL (used once), or fresh from
// the token URL. Without any, the socket opens unauthenticated (a server without API keys).
async function clientSecret() {
  const typed = $("client-secret").value.trim();
  if (typed) {
    $("client-secret").value = ""; // single use
    return typed;
  }
  const tokenUrl = params.get("token_url");
  if (!tokenUrl) return null;
  const response = await fetch(tokenUrl, { method: "POST" });
  if (!response.ok) throw new Error(`token URL answered HTTP ${response.status}`);
  const body = await response.json();
  return body.value ?? body.client_secret?.value;
}

function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  const step = 0x8000; // String.fromCharCode's argument list has a size limit
  for (let i = 0; i < bytes.length; i += step) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + step));
  }
  return btoa(binary);
}

// ------------------------------------------------------------------ microphone

class LiveTranscript {
  // One paragraph per conversation item: partial text while deltas arrive, final when completed.
  constructor(container) {
    this.container = container;
    this.items = new Map();
  }

  paragraph(itemId) {
    let p = this.items.get(itemId);
    if (!p) {
      p = document.createElement("p");
      p.className = "partial";
      p.dataset.itemId = itemId;
      this.container.appendChild(p);
      this.items.set(itemId, p);
    }
    return p;
  }

  // `delta`s only append (OpenAI's protocol). The session includes OASR's tentative text, so
  // `committed` + `tentative` (extensions) is the whole current text, revisions included.
  delta(itemId, delta, committed, tentative) {
    const p = this.paragraph(itemId);
    if (p.className !== "partial") return;
    p.textContent = typeof tentative === "string" ? committed + tentative : p.textContent + delta;
  }

  completed(itemId, transcript) {
    const p = this.paragraph(itemId);
    p.textContent = transcript;
    p.className = "final";
  }

  pending() {
    return [...this.items.values()].some((p) => p.className === "partial");
  }
}

class MicSession {
  constructor(statusElement, transcript) {
    this.status = statusElement;
    this.transcript = transcript;
    this.socket = null;
    this.context = null;
    this.stream = null;
    this.worklet = null;
    this.resume = null; // {token, grace_seconds} from session.created
    this.lastEventId = null;
    this.sent = []; // audio chunks and commits, in order, for re-sending after a reconnect
    this.samples = 0; // audio samples sent so far
    this.prunedCommits = 0; // commits dropped from `sent` with the audio before them
    this.reconnecting = false;
  }

  socketUrl(query = "") {
    const url = new URL(`v1/realtime?intent=transcription${query}`, apiBase());
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    return url;
  }

  async start() {
    const secret = await clientSecret();
    // Browsers cannot set an Authorization header on a WebSocket; OpenAI's protocol carries
    // the credential (here the client secret) as a subprotocol instead.
    const protocols = secret ? ["realtime", `openai-insecure-api-key.${secret}`] : ["realtime"];
    const model = secret ? null : await servedModel(); // a secret's session already names its model

    // Capture starts before the socket is open and queues its chunks: people talk as soon
    // as they press Start, and the first words must not be lost to the connection setup.
    setStatus(this.status, "asking for the microphone…");
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true },
    });
    this.context = new AudioContext();
    await this.context.audioWorklet.addModule(new URL("pcm-worklet.js", import.meta.url));
    this.inSpeech = false; // server VAD heard speech it has not committed yet
    this.worklet = new AudioWorkletNode(this.context, "pcm-capture");
    this.worklet.port.onmessage = (event) => this.sendAudio(event.data);
    this.context.createMediaStreamSource(this.stream).connect(this.worklet);

    setStatus(this.status, "connecting…");
    await this.open(this.socketUrl(), protocols);
    const input = { format: { type: "audio/pcm", rate: SAMPLE_RATE }, turn_detection: { type: "server_vad" } };
    if (model) input.transcription = { model };
    this.socket.send(JSON.stringify({ type: "session.update", session: {
      type: "transcription", audio: { input }, include: ["item.input_audio_transcription.tentative"] } }));
    this.flushQueued();
    setStatus(this.status, "listening");
  }

  async open(url, protocols) {
    const socket = new WebSocket(url, protocols);
    await new Promise((resolve, reject) => {
      socket.onopen = resolve;
      socket.onerror = () => reject(new Error(`cannot connect to ${url.origin}${url.pathname}`));
    });
    socket.onmessage = (event) => this.onEvent(JSON.parse(event.data));
    socket.onclose = (event) => this.onClose(event);
    this.socket = socket;
  }

  onClose(event) {
    if (!this.stopping && event.code !== 1000 && this.resume && event.code < 4400) {
      this.reconnect(); // a dropped connection: the server keeps the session for its grace period
      return;
    }
    const clean = event.code === 1000 || event.code === 1005;
    setStatus(this.status, clean ? "closed" : `closed (${event.code} ${event.reason})`, !clean);
    this.release();
  }

  async reconnect() {
    this.reconnecting = true;
    this.socket = null;
    const query = `&resume_token=${encodeURIComponent(this.resume.token)}&last_event_id=${encodeURIComponent(this.lastEventId)}`;
    let delay = RESUME_BACKOFF_MS;
    for (let attempt = 1; attempt <= RESUME_ATTEMPTS && !this.stopping; attempt++) {
      setStatus(this.status, `connection lost; resuming (attempt ${attempt})…`);
      try {
        await this.open(this.socketUrl(query), ["realtime"]); // the resume token is the credential
        return; // session.resumed re-sends what the server lacks
      } catch {
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay *= 2;
      }
    }
    this.reconnecting = false;
    setStatus(this.status, "connection lost; could not resume the session", true);
    this.release();
  }

  sendAudio(pcm) {
    this.sent.push({ pcm, before: this.samples });
    this.samples += pcm.byteLength / 2;
    const keepFrom = this.samples - RESUME_KEEP_S * SAMPLE_RATE;
    while (this.sent.length && this.sent[0].before < keepFrom - SAMPLE_RATE) {
      // older than the grace period: the server held it long ago (a commit before it too)
      if (this.sent.shift().commit) this.prunedCommits++;
    }
    this.send({ type: "input_audio_buffer.append", audio: toBase64(pcm) });
  }

  commit() {
    this.sent.push({ commit: true, before: this.samples });
    this.send({ type: "input_audio_buffer.commit" });
  }

  // Capture that started before the socket opened.
  flushQueued() {
    for (const op of this.sent) {
      if (op.pcm) this.send({ type: "input_audio_buffer.append", audio: toBase64(op.pcm) });
    }
  }

  // After session.resumed: audio from audio_end_ms on, and the commits after the first
  // commits_received, in the order they were first sent.
  resend(audioEndMs, commitsReceived) {
    const held = Math.floor((audioEndMs * SAMPLE_RATE) / 1000);
    let commits = commitsReceived - this.prunedCommits;
    for (const op of this.sent) {
      if (op.commit) {
        if (commits > 0) commits--;
        else this.send({ type: "input_audio_buffer.commit" });
        continue;
      }
      const end = op.before + op.pcm.byteLength / 2;
      if (end <= held) continue;
      const skip = Math.max(0, held - op.before) * 2;
      this.send({ type: "input_audio_buffer.append", audio: toBase64(op.pcm.slice(skip)) });
    }
  }

  send(event) {
    if (this.socket && this.socket.readyState === WebSocket.OPEN && !this.reconnecting) {
      this.socket.send(JSON.stringify(event));
    }
  }

  onEvent(event) {
    this.lastEventId = event.event_id;
    switch (event.type) {
      case "session.created":
        this.resume = event.resume ?? null;
        break;
      case "session.resumed":
        this.reconnecting = false;
        this.resend(event.audio_end_ms, event.commits_received);
        setStatus(this.status, this.stopping ? "finishing…" : "listening (resumed)");
        break;
      case "conversation.item.input_audio_transcription.delta":
        this.transcript.delta(event.item_id, event.delta, event.committed, event.tentative);
        break;
      case "conversation.item.input_audio_transcription.completed":
        this.transcript.completed(event.item_id, event.transcript);
        if (this.stopping && !this.transcript.pending()) this.socket.close(1000);
        break;
      case "input_audio_buffer.speech_started":
        this.inSpeech = true;
        setStatus(this.status, "hearing speech");
        break;
      case "input_audio_buffer.speech_stopped":
      case "input_audio_buffer.committed":
        this.inSpeech = false;
        if (!this.stopping) setStatus(this.status, "listening");
        break;
      case "error":
        setStatus(this.status, `server error: ${event.error?.message ?? "unknown"}`, true);
        break;
      default:
        break; // session.updated, conversation.item.added/done, … need no display
    }
  }

  async stop() {
    this.stopping = true;
    this.stopCapture(); // the worklet's last partial chunk (< 100 ms) is dropped, not sent after the commit
    // Commit a turn the VAD has not closed yet (with server VAD a commit without speech is
    // an error), then wait for the last final transcript.
    if (this.inSpeech) this.commit();
    if (!this.inSpeech && !this.transcript.pending()) {
      if (this.socket) this.socket.close(1000);
      return;
    }
    setStatus(this.status, "finishing…");
    setTimeout(() => this.socket && this.socket.close(1000), FINAL_WAIT_MS);
  }

  stopCapture() {
    if (this.stream) this.stream.getTracks().forEach((track) => track.stop());
    if (this.context && this.context.state !== "closed") this.context.close();
    this.stream = null;
  }

  release() {
    this.stopCapture();
    this.socket = null;
    $("mic-start").disabled = false;
    $("mic-stop").disabled = true;
  }
}

let mic = null;

$("client-secret").value = params.get("client_secret") ?? "";

$("mic-start").addEventListener("click", async () => {
  $("mic-start").disabled = true;
  $("mic-stop").disabled = false;
  mic = new MicSession($("mic-status"), new LiveTranscript($("live")));
  window.oasrMic = mic; // for debugging (and the browser test's dropped-connection check)
  try {
    await mic.start();
  } catch (error) {
    setStatus($("mic-status"), error.message, true);
    mic.release();
  }
});

$("mic-stop").addEventListener("click", () => {
  $("mic-stop").disabled = true;
  if (mic) mic.stop();
});

// ------------------------------------------------------------------ file upload

function renderWords(container, words, player) {
  container.replaceChildren();
  for (const word of words) {
    const span = document.createElement("span");
    span.textContent = word.word.trim();
    span.dataset.start = word.start;
    span.dataset.end = word.end;
    span.title = `${word.start.toFixed(2)}–${word.end.toFixed(2)} s`;
    span.addEventListener("click", () => {
      player.currentTime = word.start;
      player.play();
    });
    container.append(span, " ");
  }
}

function highlightCurrentWord(container, time) {
  for (const span of container.children) {
    const on = time >= Number(span.dataset.start) && time < Number(span.dataset.end);
    span.classList.toggle("current", on);
  }
}

async function transcribeFile(file) {
  const form = new FormData();
  form.append("file", file);
  const model = await servedModel();
  if (model) form.append("model", model);
  form.append("response_format", "verbose_json");
  form.append("timestamp_granularities[]", "word");
  const response = await fetch(new URL("v1/audio/transcriptions", apiBase()), {
    method: "POST",
    body: form,
    headers: authHeaders(),
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error?.message ?? `HTTP ${response.status}`);
  return body;
}

$("file").addEventListener("change", () => {
  $("file-go").disabled = !$("file").files.length;
});

$("file-go").addEventListener("click", async () => {
  const file = $("file").files[0];
  const player = $("player");
  const words = $("words");
  $("file-go").disabled = true;
  setStatus($("file-status"), "transcribing…");
  try {
    const started = performance.now();
    const result = await transcribeFile(file);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    player.src = URL.createObjectURL(file);
    player.hidden = false;
    if (result.words && result.words.length) {
      renderWords(words, result.words, player);
    } else {
      words.textContent = result.text; // a server without word timings still gets a transcript
    }
    setStatus($("file-status"), `done in ${seconds} s (${result.duration?.toFixed?.(1) ?? "?"} s of audio)`);
  } catch (error) {
    setStatus($("file-status"), error.message, true);
  } finally {
    $("file-go").disabled = false;
  }
});

$("player").addEventListener("timeupdate", () => highlightCurrentWord($("words"), $("player").currentTime));
