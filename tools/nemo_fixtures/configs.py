"""Model configs for the tiny NeMo fixture checkpoints (run inside the throwaway NeMo venv).

Each builder returns an OmegaConf-ready dict in the shape of NeMo's published FastConformer
configs (examples/asr/conf/fastconformer/...), shrunk to d_model 64-96 and 2 layers so a
`.nemo` stays well under 4 MB. Only the keys a user's checkpoint carries matter to the engine;
the training sections are kept (with null manifests) because NeMo refuses to build without them.
"""

from __future__ import annotations

import copy
from typing import Any

SAMPLE_RATE = 16000


def _datasets() -> dict[str, Any]:
    ds = {"manifest_filepath": None, "sample_rate": SAMPLE_RATE, "batch_size": 2, "shuffle": False}
    return {"train_ds": dict(ds), "validation_ds": dict(ds), "test_ds": dict(ds)}


def _preprocessor(normalize: str) -> dict[str, Any]:
    return {
        "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
        "sample_rate": SAMPLE_RATE,
        "normalize": normalize,
        "window_size": 0.025,
        "window_stride": 0.01,
        "window": "hann",
        "features": 80,
        "n_fft": 512,
        "frame_splicing": 1,
        "dither": 0.00001,  # a training setting: the published configs carry it, inference ignores it
        "pad_to": 0,
    }


def _encoder(**overrides: Any) -> dict[str, Any]:
    enc = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder",
        "feat_in": 80,
        "feat_out": -1,
        "n_layers": 2,
        "d_model": 64,
        "use_bias": True,
        "subsampling": "dw_striding",
        "subsampling_factor": 8,
        "subsampling_conv_channels": 32,
        "causal_downsampling": False,
        "ff_expansion_factor": 2,
        "self_attention_model": "rel_pos",
        "n_heads": 4,
        "att_context_size": [-1, -1],
        "att_context_style": "regular",
        "att_context_probs": None,
        "xscaling": True,
        "untie_biases": True,
        "pos_emb_max_len": 5000,
        "conv_kernel_size": 9,
        "conv_norm_type": "batch_norm",
        "conv_context_size": None,
        "dropout": 0.1,
        "dropout_pre_encoder": 0.1,
        "dropout_emb": 0.0,
        "dropout_att": 0.1,
        "stochastic_depth_drop_prob": 0.0,
        "stochastic_depth_mode": "linear",
        "stochastic_depth_start_layer": 1,
    }
    enc.update(overrides)
    return enc


def _transducer(hidden: int, enc_hidden: int, tdt_durations: list[int] | None = None) -> dict[str, Any]:
    joint: dict[str, Any] = {
        "_target_": "nemo.collections.asr.modules.RNNTJoint",
        "log_softmax": None,
        "preserve_memory": False,
        "fuse_loss_wer": True,
        "fused_batch_size": 4,
        "jointnet": {"joint_hidden": hidden, "activation": "relu", "dropout": 0.2},
    }
    decoding: dict[str, Any] = {"strategy": "greedy_batch", "greedy": {"max_symbols": 5}}
    loss: dict[str, Any] = {"loss_name": "default"}
    if tdt_durations is not None:
        joint["num_extra_outputs"] = len(tdt_durations)
        decoding.update(model_type="tdt", durations=tdt_durations)
        loss = {
            "loss_name": "tdt",
            "tdt_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0, "durations": tdt_durations, "sigma": 0.02,
                           "omega": 0.1},
        }  # fmt: skip
    return {
        "model_defaults": {"enc_hidden": enc_hidden, "pred_hidden": hidden, "joint_hidden": hidden},
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder",
            "normalization_mode": None,
            "random_state_sampling": False,
            "blank_as_pad": True,
            "prednet": {"pred_hidden": hidden, "pred_rnn_layers": 1, "t_max": None, "dropout": 0.2},
        },
        "joint": joint,
        "decoding": decoding,
        "loss": loss,
    }


def _ctc_head() -> dict[str, Any]:
    return {
        "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
        "feat_in": None,
        "num_classes": -1,
        "vocabulary": [],
    }


def _model(tokenizer_dir: str, normalize: str, encoder: dict[str, Any]) -> dict[str, Any]:
    return {
        "sample_rate": SAMPLE_RATE,
        "log_prediction": False,
        **_datasets(),
        "tokenizer": {"dir": tokenizer_dir, "type": "bpe"},
        "preprocessor": _preprocessor(normalize),
        "spec_augment": {
            "_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
            "freq_masks": 2,
            "time_masks": 2,
            "freq_width": 27,
            "time_width": 0.05,
        },
        "encoder": encoder,
        "optim": {"name": "adamw", "lr": 1e-3},
    }


def hybrid_cache_aware(tokenizer_dir: str) -> dict[str, Any]:
    """Hybrid RNNT+CTC, cache-aware (chunked_limited) with three trained look-aheads, causal
    subsampling and convolutions, layer-norm conv module, no feature normalisation (NA) as in
    NeMo's cache-aware streaming configs."""
    enc = _encoder(
        causal_downsampling=True,
        att_context_size=[[12, 3], [12, 1], [12, 0]],
        att_context_style="chunked_limited",
        conv_norm_type="layer_norm",
        conv_context_size="causal",
    )
    cfg = _model(tokenizer_dir, "NA", enc)
    cfg.update(_transducer(64, enc["d_model"]))
    cfg["aux_ctc"] = {
        "ctc_loss_weight": 0.3,
        "use_cer": False,
        "ctc_reduction": "mean_batch",
        "decoder": _ctc_head(),
        "decoding": {"strategy": "greedy"},
    }
    return cfg


def unified_rc(tokenizer_dir: str) -> dict[str, Any]:
    """RNN-T 'unified' checkpoint: chunked_limited_with_rc attention with trained (L, C, R)
    choices, symmetric convolutions, batch-norm conv module, per_feature normalisation, tied
    Transformer-XL biases. Left 10 is not a multiple of chunk 4: the window grid is misaligned
    on purpose (NeMo does not re-align it)."""
    enc = _encoder(
        att_context_size=[-1, -1],
        att_chunk_context_size=[[10], [1, 2, 4], [1, 2, 4]],
        att_context_style="chunked_limited_with_rc",
        untie_biases=False,
        conv_norm_type="batch_norm",
    )
    cfg = _model(tokenizer_dir, "per_feature", enc)
    cfg.update(_transducer(64, enc["d_model"]))
    return cfg


def ctc_striding_bn(tokenizer_dir: str) -> dict[str, Any]:
    """CTC-only, `striding` subsampling by 4, batch-norm conv module, no xscaling, kernel 15,
    per_feature normalisation: the offline Conformer-CTC shape."""
    enc = _encoder(
        subsampling="striding",
        subsampling_factor=4,
        d_model=96,
        n_heads=4,
        xscaling=False,
        conv_kernel_size=15,
        conv_norm_type="batch_norm",
    )
    cfg = _model(tokenizer_dir, "per_feature", enc)
    cfg["decoder"] = _ctc_head()
    cfg["decoder"]["feat_in"] = 96
    cfg["decoding"] = {"strategy": "greedy"}
    return cfg


def tdt(tokenizer_dir: str) -> dict[str, Any]:
    """Token-and-duration transducer (durations 0..4) on a dw_striding x8 encoder, NA features."""
    enc = _encoder(conv_norm_type="layer_norm")
    cfg = _model(tokenizer_dir, "NA", enc)
    cfg.update(_transducer(64, enc["d_model"], tdt_durations=[0, 1, 2, 3, 4]))
    return cfg


def realistic_cache_aware(tokenizer_dir: str, d_model: int = 256, n_layers: int = 16) -> dict[str, Any]:
    """A FastConformer of realistic size for the capacity benchmark (not committed): the
    hybrid cache-aware shape with NeMo's published look-aheads [70, 0|1|6|13] (80..1120 ms)."""
    cfg = copy.deepcopy(hybrid_cache_aware(tokenizer_dir))
    cfg["encoder"].update(
        d_model=d_model, n_layers=n_layers, n_heads=8 if d_model >= 256 else 4, ff_expansion_factor=4,
        subsampling_conv_channels=256, att_context_size=[[70, 13], [70, 6], [70, 1], [70, 0]],
    )  # fmt: skip
    cfg["model_defaults"].update(enc_hidden=d_model, pred_hidden=320, joint_hidden=320)
    cfg["decoder"]["prednet"]["pred_hidden"] = 320
    cfg["joint"]["jointnet"]["joint_hidden"] = 320
    return cfg


BUILDERS = {
    "hybrid_cache_aware": ("EncDecHybridRNNTCTCBPEModel", hybrid_cache_aware),
    "unified_rc": ("EncDecRNNTBPEModel", unified_rc),
    "ctc_striding_bn": ("EncDecCTCModelBPE", ctc_striding_bn),
    "tdt": ("EncDecRNNTBPEModel", tdt),
}
"""Fixture name -> (NeMo model class, config builder)."""
