"""Build tiny random-weight Qwen2-Audio and Qwen3-ASR checkpoints with Transformers itself and
record Transformers' `generate` on them: the parity fixtures of the speech-LLM family.

Run by hand with the project's venv (Transformers is installed there for tools like this one;
the engine never imports it):

    OASR_SPEECH_DATA=../shared/data/speech .venv/bin/python tools/speechllm_fixtures.py --model qwen2_audio --out tests/fixtures/speechllm/qwen2_audio
    OASR_SPEECH_DATA=../shared/data/speech .venv/bin/python tools/speechllm_fixtures.py --model qwen3_asr --out tests/fixtures/speechllm/qwen3_asr

Writes the checkpoint as Transformers saves it (config.json, model.safetensors,
generation_config.json, tokenizer.json + tokenizer_config.json with the chat template,
preprocessor_config.json) and `reference.json`: per setting (clip, decoding options), the
prompt text the chat template rendered, the processor's input ids, greedy tokens with their
log-probabilities, and the beam n-best (`num_return_sequences` = beams) with scores.

The tokenizer is a byte-level BPE in Qwen2's layout, trained offline on the dev transcripts
(a few hundred tokens) with the model's special tokens added. Qwen2-Audio's chat template is its
processor's own `default_chat_template` (Qwen2-Audio-7B-Instruct's). Qwen3-ASR's is the
published one (QWEN3_ASR_TEMPLATE, verbatim from Transformers' converter, checked against the hub
checkpoint's processor test); requests go through its processor's `apply_transcription_request`
and must render as the `qwen-asr` package's own message list does. Random weights give near-uniform
logits, so the LM head is scaled up (`LM_HEAD_GAIN`): wider gaps between the best tokens keep
parity from hanging on float rounding; the end-of-turn token's row is raised so that some
hypotheses end before `MAX_NEW_TOKENS` and beam search finishes hypotheses of several lengths.

"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.models.speechllm.prompt import (  # noqa: E402
    AUDIO_PAD,
    LANGUAGE_NAMES,
    QWEN3_AUDIO_PAD,
    PromptSpec,
    Qwen3ASRPrompt,
    user_instruction,
)
from engine.types import DecodingOptions  # noqa: E402
from tests.conftest import load_clip, manifest  # noqa: E402

logger = logging.getLogger("speechllm_fixtures")

SEED = 20261203
VOCAB_SIZE = 480
"""BPE vocabulary before the special tokens (256 byte symbols + merges)."""
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
LM_HEAD_GAIN = 25.0
EOS_ROW_GAIN = 2.0
LAYER_OUTPUT_GAIN = 20.0
PROJECTOR_GAIN = 8.0
"""Audio embeddings as loud as the token embeddings they sit among, so transcripts follow the audio."""
MAX_NEW_TOKENS = 20
CLIPS = ("mfa_her", "mfa_thoughts", "mfa_um")
SETTINGS: tuple[dict[str, Any], ...] = (
    {},
    {"language": "en"},
    {"prompt": "montreal forced aligner"},
    {"keywords": ["aligner", "thousand"]},
)
"""Request options each clip is decoded with (DecodingOptions fields)."""
BEAMS = (2, 4)
QWEN_PRETOKENIZE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                    r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")



QWEN3_ASR_TEMPLATE = (
    "{%- set ns = namespace(system_text='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{%- if m.content is string -%}"
    "{%- set ns.system_text = ns.system_text + m.content -%}"
    "{%- else -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'text' and (c.text is defined) -%}"
    "{%- set ns.system_text = ns.system_text + c.text -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- set ns2 = namespace(audio_tokens='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.content is not string -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'audio' or ('audio' in c) or ('audio_url' in c) -%}"
    "{%- set ns2.audio_tokens = ns2.audio_tokens + '<|audio_start|><|audio_pad|><|audio_end|>' -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{{- '<|im_start|>system\n' + ns.system_text + '<|im_end|>\n' -}}"
    "{{- '<|im_start|>user\n' + ns2.audio_tokens + '<|im_end|>\n' -}}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{%- set ns3 = namespace(assistant_text='') -%}"
    "{%- if m.content is string -%}"
    "{%- set ns3.assistant_text = m.content -%}"
    "{%- else -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'text' and (c.text is defined) -%}"
    "{%- set ns3.assistant_text = ns3.assistant_text + c.text -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>assistant\n' -}}"
    "{% generation %}"
    "{{- ns3.assistant_text + '<|im_end|>\n' -}}"
    "{% endgeneration %}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\n' -}}"
    "{%- endif -%}"
)
"""The published Qwen3-ASR chat template, verbatim: `ASR_CHAT_TEMPLATE` of Transformers'
src/transformers/models/qwen3_asr/convert_qwen3_asr_to_hf.py (commit 060988b644b9), which writes it
into the Qwen/Qwen3-ASR-*-hf checkpoints: the original repo's chat_template.json (system turn always
rendered, from the system messages' text, "" when there are none; the audio user turn) extended
with assistant turns for `continue_final_message`. The converter is not in Transformers' wheel or
sdist, so the constant is copied here; `check_qwen3_template` pins what it renders against the
published checkpoint's own processor test."""

HUB_EXPECTED_PROMPT = ("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n"
                       "<|audio_start|><|audio_pad|><|audio_end|><|im_end|>\n<|im_start|>assistant\n")
"""What Qwen/Qwen3-ASR-0.6B-hf's processor renders for a user-only chat with an audio part
(Transformers' tests/models/qwen3_asr/test_processing_qwen3_asr.py, `test_chat_template`)."""


def check_qwen3_template(processor: Any) -> None:
    """Stop unless the template renders as the published checkpoint's does (Transformers' hub test)
    and as the `qwen-asr` package asks it: `Qwen3ASRModel._build_text_prompt` (qwen-asr 0.0.6,
    qwen_asr/inference/qwen3_asr.py) sends `[{"role": "system", "content": context or ""}, {"role":
    "user", "content": [{"type": "audio", ...}]}]` with `add_generation_prompt=True` and appends
    `language <Name><asr_text>` for a forced language."""
    user_only = [{"role": "user", "content": [{"type": "audio", "audio": ""}]}]
    text = processor.apply_chat_template(user_only, tokenize=False, add_generation_prompt=True)
    if text != HUB_EXPECTED_PROMPT:
        raise SystemExit(f"the Qwen3-ASR template renders {text!r}, the published checkpoint {HUB_EXPECTED_PROMPT!r}")


def qwen_asr_package_prompt(processor: Any, context: str, language: str | None) -> str:
    """The prompt text the `qwen-asr` package builds (its `_build_text_prompt`, see above)."""
    msgs = [{"role": "system", "content": context or ""},
            {"role": "user", "content": [{"type": "audio", "audio": ""}]}]
    base = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    return base + (f"language {language}<asr_text>" if language else "")


def build_tokenizer(kind: str = "qwen2_audio") -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    texts = [c.text for c in manifest() if c.text]
    texts += [user_instruction(DecodingOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in s.items()}))
              for s in SETTINGS]
    texts += ["You are a helpful assistant.", "system user assistant Audio 1: \n"]
    if kind == "qwen3_asr":
        texts += [f"language {name}" for name in LANGUAGE_NAMES.values()]
    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(texts * 4, trainer)
    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    if kind == "qwen3_asr":
        tok = Qwen2Tokenizer(vocab=state["vocab"], merges=merges, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                             extra_special_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                                                   "audio_eos_token": "<|audio_end|>"})
        tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<asr_text>"]})
        tok.chat_template = QWEN3_ASR_TEMPLATE
        return tok
    tok = Qwen2Tokenizer(vocab=state["vocab"], merges=merges, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS[1:])})
    return tok


def build_model(tok: Any) -> Any:
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    audio = dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128)
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2)
    config = Qwen2AudioConfig(
        audio_config=dict(model_type="qwen2_audio_encoder", num_mel_bins=128, max_source_positions=1500, **audio),
        text_config=dict(model_type="qwen2", vocab_size=len(tok), max_position_embeddings=4096, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                         tie_word_embeddings=False, bos_token_id=None,
                         eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), **text),
        audio_token_index=tok.convert_tokens_to_ids("<|AUDIO|>"),
    )
    torch.manual_seed(SEED)
    model = Qwen2AudioForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(LM_HEAD_GAIN)
        model.lm_head.weight[tok.convert_tokens_to_ids("<|im_end|>")] *= EOS_ROW_GAIN
        model.model.multi_modal_projector.linear.weight.mul_(PROJECTOR_GAIN)
    return model


def build_qwen3_asr(tok: Any) -> Any:
    from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    config = Qwen3ASRConfig(
        audio_config=dict(model_type="qwen3_asr_encoder", num_mel_bins=128, d_model=64, encoder_layers=2,
                          encoder_attention_heads=4, encoder_ffn_dim=128, output_dim=64, downsample_hidden_size=16,
                          n_window=50, n_window_infer=400),
        text_config=dict(model_type="qwen3", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        audio_token_id=tok.convert_tokens_to_ids("<|audio_pad|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=generation_ids(tok)["eos_token_id"], tie_word_embeddings=True,
    )
    torch.manual_seed(SEED)
    model = Qwen3ASRForConditionalGeneration(config).eval()
    with torch.no_grad():
        # tied embeddings: a random residual stream is mostly the input token's embedding, whose
        # own logit then wins (the model repeats its input); louder layer outputs break that, and
        # the gain goes on the final norm, the LM head's input
        for layer in model.model.language_model.layers:
            layer.self_attn.o_proj.weight.mul_(LAYER_OUTPUT_GAIN)
            layer.mlp.down_proj.weight.mul_(LAYER_OUTPUT_GAIN)
        model.model.language_model.norm.weight.mul_(LM_HEAD_GAIN)
        model.lm_head.weight[tok.convert_tokens_to_ids("<|im_end|>")] *= EOS_ROW_GAIN
    return model


def build_processor(tok: Any, kind: str = "qwen2_audio") -> Any:
    if kind == "qwen3_asr":
        from transformers import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor

        return Qwen3ASRProcessor(feature_extractor=Qwen3ASRFeatureExtractor(), tokenizer=tok,
                                 chat_template=QWEN3_ASR_TEMPLATE)
    from transformers import Qwen2AudioProcessor, WhisperFeatureExtractor

    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400,
                                 return_attention_mask=True)
    # no chat_template: the processor takes its own `default_chat_template`, Qwen2-Audio-7B-Instruct's
    return Qwen2AudioProcessor(feature_extractor=fe, tokenizer=tok)


def generation_ids(tok: Any) -> dict[str, Any]:
    return {"eos_token_id": [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")],
            "pad_token_id": tok.convert_tokens_to_ids("<|endoftext|>")}


def _inputs(kind: str, processor: Any, opts: DecodingOptions, audio: Any) -> tuple[str, Any]:
    """The prompt text the checkpoint's template renders for `opts`, and the processor's inputs;
    stops when engine/models/speechllm/prompt.py renders another text."""
    if kind == "qwen3_asr":
        spec3 = Qwen3ASRPrompt.from_options(opts)
        kwargs = {"language": opts.language, "prompt": spec3.context or None}
        (text,) = processor.apply_transcription_request(audio, tokenize=False, **kwargs)
        package = qwen_asr_package_prompt(processor, spec3.context, spec3.language)
        if text != package:
            raise SystemExit(f"Transformers renders {text!r}, the qwen-asr package {package!r}")
        before, after = spec3.render()
        ours = before + QWEN3_AUDIO_PAD + after
        inputs = processor.apply_transcription_request(audio, **kwargs)
    else:
        spec = PromptSpec.from_options(opts)
        text = processor.apply_chat_template(spec.messages(), add_generation_prompt=True, tokenize=False)
        before, after = spec.render()
        ours = before + AUDIO_PAD + after
        inputs = processor(text=text, audio=[audio], sampling_rate=16000, return_tensors="pt")
    if text != ours:
        raise SystemExit(f"the chat template renders {text!r}, engine/models/speechllm/prompt.py {ours!r}")
    return text, inputs


def record(kind: str, model: Any, processor: Any, tok: Any) -> list[dict[str, Any]]:
    gen = generation_ids(tok)
    cases = []
    for clip in CLIPS:
        audio = load_clip(clip)
        for setting in SETTINGS:
            opts = DecodingOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in setting.items()})
            text, inputs = _inputs(kind, processor, opts, audio)
            prompt_len = inputs["input_ids"].shape[1]
            case: dict[str, Any] = {"clip": clip, "options": setting, "prompt_text": text,
                                    "input_ids": inputs["input_ids"][0].tolist()}
            with torch.no_grad():
                out = model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=MAX_NEW_TOKENS,
                                     repetition_penalty=1.0, output_scores=True, return_dict_in_generate=True, **gen)
            tokens = out.sequences[0, prompt_len:].tolist()
            logprobs = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, tokens)]
            case["greedy"] = {"tokens": tokens, "logprobs": logprobs,
                              "text": tok.decode(tokens, skip_special_tokens=True)}
            case["beam"] = {}
            for beams in BEAMS:
                with torch.no_grad():
                    out = model.generate(**inputs, do_sample=False, num_beams=beams, num_return_sequences=beams,
                                         max_new_tokens=MAX_NEW_TOKENS, repetition_penalty=1.0, length_penalty=1.0,
                                         early_stopping=False, output_scores=True, return_dict_in_generate=True,
                                         **gen)
                hyps = []
                for seq, score in zip(out.sequences, out.sequences_scores):
                    toks = seq[prompt_len:].tolist()
                    while toks and toks[-1] == gen["pad_token_id"]:  # right padding of shorter hypotheses
                        toks.pop()
                    hyps.append({"tokens": toks, "score": float(score)})
                case["beam"][str(beams)] = hyps
            logger.info("%s %s: greedy %d tokens %r", clip, setting, len(tokens), case["greedy"]["text"][:40])
            cases.append(case)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory to write the checkpoint (and reference.json) into")
    parser.add_argument("--model", choices=("qwen2_audio", "qwen3_asr"), default="qwen2_audio")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    tok = build_tokenizer(args.model)
    model = build_qwen3_asr(tok) if args.model == "qwen3_asr" else build_model(tok)
    processor = build_processor(tok, args.model)
    if args.model == "qwen3_asr":
        check_qwen3_template(processor)
    os.makedirs(args.out, exist_ok=True)
    model.generation_config.update(do_sample=False, **generation_ids(tok))
    model.save_pretrained(args.out)
    processor.save_pretrained(args.out)
    cases = record(args.model, model, processor, tok)
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump({"max_new_tokens": MAX_NEW_TOKENS, "seed": SEED, "cases": cases}, f, indent=1)
    lengths = [len(c["greedy"]["tokens"]) for c in cases]
    logger.info("greedy lengths %s; distinct %d/%d", lengths, len({tuple(c["greedy"]["tokens"]) for c in cases}),
                len(cases))


if __name__ == "__main__":
    main()
