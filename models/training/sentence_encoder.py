"""A sentence-transformers encoder: how the surrogate, its teacher and every evaluated model are
built from a backbone, and one batched forward pass through it.

Kept out of the stages because `train`, `evaluate`, the train objectives (a teacher's labels) and
the benches all build and run encoders the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def dropout_config(config: dict[str, Any], p: float) -> dict[str, float]:
    """Config overrides that set every dropout probability of a transformers config to ``p``
    (``hidden_dropout_prob``, ``attention_probs_dropout_prob``, ``attention_dropout``, ...):
    SimCSE needs a noisy forward pass, and Gemma-3 ships with its only dropout at 0. Keys left
    unset (``classifier_dropout: None``) stay unset."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"train.dropout must be in [0, 1), got {p}")
    return {
        k: float(p)
        for k, v in config.items()
        if ("dropout" in k or k.endswith("pdrop"))
        and isinstance(v, int | float)
        and not isinstance(v, bool)
    }


def transformer_dir(st_dir: Path) -> str:
    """The folder of a sentence-transformers directory's Transformer module (its config.json)."""
    for module in json.loads((st_dir / "modules.json").read_text()):
        if module.get("type", "").endswith("Transformer"):
            return str(st_dir / module.get("path", ""))
    return str(st_dir)


def build_model(backbone_path: str, max_seq_length: int, device: str, dropout: float | None = None):
    """SentenceTransformer = Transformer(backbone) + mean Pooling (Sun et al. 2022, Sec. 3.4); a
    sentence-transformers directory loads as it is. ``dropout`` overrides every dropout
    probability of the backbone's config (None keeps them)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models

    st_dir = (Path(backbone_path) / "modules.json").exists()
    config_kwargs = None
    if dropout is not None:
        from transformers import AutoConfig

        cfg_dir = transformer_dir(Path(backbone_path)) if st_dir else backbone_path
        config_kwargs = dropout_config(AutoConfig.from_pretrained(cfg_dir).to_dict(), dropout)
    if st_dir:
        model = SentenceTransformer(backbone_path, device=device, config_kwargs=config_kwargs)
        model.max_seq_length = max_seq_length
        return model
    tr = st_models.Transformer(
        backbone_path, max_seq_length=max_seq_length, config_kwargs=config_kwargs
    )
    tok = tr.tokenizer
    if tok.pad_token is None:  # decoder-only backbones (Gemma, SmolLM) ship without one
        tok.pad_token = tok.eos_token or tok.unk_token
    # renamed in sentence-transformers 5.x; the old name still works but warns
    dim = getattr(tr, "get_embedding_dimension", None) or tr.get_word_embedding_dimension
    pool = st_models.Pooling(dim(), pooling_mode="mean")
    return SentenceTransformer(modules=[tr, pool], device=device)


def build_student(
    backbone_path: str,
    max_seq_length: int,
    device: str,
    dropout: float | None = None,
    freeze_embeddings: bool = False,
    attention: str = "sdpa",
    freeze_layers: int = 0,
    dropout_masks: str = "torch",
    unpad: bool | str = False,
):
    """The model a training run starts from: ``build_model`` without the card's Hub widget
    examples (they cost a pass over the data and print their own bar), its input embeddings
    frozen when asked (train.freeze_embeddings), its attention kernel ``attention``
    (train.attention; auto: ``training_attention``; a runtime choice, not written into the
    saved config), its embeddings and lowest ``freeze_layers`` layers fixed (``freeze_bottom``),
    its dropout masks drawn as ``dropout_masks`` says (train.dropout_masks; auto:
    ``training_dropout_masks``; bytes: models/training/dropout.py, also a runtime choice), its
    linear layers on real tokens only where ``training_unpad`` says (train.unpad;
    models/training/unpadded.py, the same function and dropout draws, a runtime choice too)."""
    model = build_model(backbone_path, max_seq_length, device, dropout)
    model.model_card_data.generate_widget_examples = False
    if freeze_embeddings:
        model[0].auto_model.get_input_embeddings().weight.requires_grad_(False)
    freeze_bottom(model[0].auto_model, freeze_layers)
    kernel = training_attention(attention, device)
    if kernel != model[0].auto_model.config._attn_implementation:
        model[0].auto_model.set_attn_implementation(kernel)
    if training_dropout_masks(dropout_masks, device) == "bytes":
        from ctxsim.models.training.dropout import use_cheap_dropout

        use_cheap_dropout(model[0].auto_model)
    if training_unpad(unpad, device, model[0].auto_model):
        from ctxsim.models.training.unpadded import use_unpadded_layers

        use_unpadded_layers(model[0].auto_model)
    return model


def freeze_bottom(auto_model: Any, n_layers: int) -> None:
    """Fix the embeddings and the lowest ``n_layers`` transformer layers (train.freeze_layers):
    no gradient then flows below the first trained layer, so a step skips their backward
    (about 2/3 of their cost). The layer stack is the module list as long as the config's
    ``num_hidden_layers`` (BERT's ``encoder.layer``, MPNet's, Gemma's ``layers``); everything
    registered before its first trained layer (the embeddings) is fixed with it."""
    if n_layers == 0:
        return
    import torch

    total = auto_model.config.num_hidden_layers
    stacks = [
        name
        for name, m in auto_model.named_modules()
        if isinstance(m, torch.nn.ModuleList) and len(m) == total
    ]
    if not stacks:
        raise ValueError(f"train.freeze_layers: no stack of {total} layers in {type(auto_model)}")
    if not 0 < n_layers < total:
        raise ValueError(
            f"train.freeze_layers must be below the backbone's {total} layers, got {n_layers}"
        )
    first_trained = f"{stacks[0]}.{n_layers}."
    for name, param in auto_model.named_parameters():
        if name.startswith(first_trained):
            break
        param.requires_grad_(False)


def training_attention(attention: str, device: str) -> str:
    """train.attention's kernel: ``auto`` is eager (plain matmuls and softmax) on CPU, where
    torch's fused attention trained slower (bench/results/train_speed_dropout_medquad.md), and
    sdpa on a GPU, where the fused kernels are the fast ones."""
    if attention != "auto":
        return attention
    return "eager" if str(device).startswith("cpu") else "sdpa"


def training_dropout_masks(masks: str, device: str) -> str:
    """train.dropout_masks' draw: ``auto`` is bytes (models/training/dropout.py) on CPU, where
    torch draws a mask one element at a time, and torch's own on a GPU, where its dropout is
    fused and cheap."""
    if masks != "auto":
        return masks
    return "bytes" if str(device).startswith("cpu") else "torch"


def training_unpad(unpad: bool | str, device: str, auto_model: Any) -> bool:
    """train.unpad: true runs the encoder's linear layers on real tokens only (an error for a
    backbone that is not BERT-shaped), false padded; ``auto`` is true on a CPU for a BERT-shaped
    backbone, where the padding's arithmetic is a quarter to a third of a random batch's, and
    false on a GPU, whose fused attention kernels want the padded shape."""
    if unpad != "auto":
        return bool(unpad)
    from ctxsim.models.training.unpadded import unpaddable

    return str(device).startswith("cpu") and unpaddable(auto_model)


def forward(model: Any, texts: list[str]) -> dict[str, Any]:
    """One inference pass over ``texts`` (bf16 autocast on CUDA where supported; on a CPU in
    the caller's autocast, if any): the model's output features (``sentence_embedding``,
    ``token_embeddings``, ``attention_mask``)."""
    import contextlib

    import torch

    feats = model.preprocess(texts)
    dev = model.device
    feats = {k: (v.to(dev) if hasattr(v, "to") else v) for k, v in feats.items()}
    use_bf16 = dev.type == "cuda" and torch.cuda.is_bf16_supported()
    # on a CPU no autocast of its own: a caller's bf16 scope (models/encoders.py bf16_scope) holds
    cast = torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()
    with torch.inference_mode(), cast:
        return model(feats)
