"""all-MiniLM-L6-v2 in numpy, for queries: the bundled model's own tokenizer and weights,
the forward pass of sentence-transformers (BERT, mean pooling, unit length) without torch.

A one-shot `ctxfst query` embeds one short text: importing torch and sentence-transformers
for it took about 5 s of a 5.5 s query. Builds keep using sentence-transformers (batches
on torch's threads); the two agree to float32 rounding (tests/test_embedders.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

MAX_TOKENS = 256  # sentence_bert_config.json's max_seq_length: longer texts are cut


class MiniLM:
    """The encoder of a sentence-transformers BERT folder (config.json, tokenizer.json,
    model.safetensors: data, never pickles)."""

    def __init__(self, folder: Path) -> None:
        from .extras import require_extra

        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
            raise ValueError(f"{folder}: not a BERT model with GELU ({config.get('model_type')})")
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        tokenizers = require_extra("tokenizers", "embed")
        self.tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.unknown = getattr(self.tokenizer.model, "unk_token", None)  # (WordPiece's)
        self.weights = require_extra("safetensors.numpy", "embed").load_file(
            str(folder / "model.safetensors"))
        hidden = int(config["hidden_size"])
        if self.weights["embeddings.word_embeddings.weight"].shape[1] != hidden \
                or hidden % self.heads:
            raise ValueError(f"{folder}: weights of another shape than config.json says")
        self.dimension = hidden

    def tokens(self, text: str) -> list[str]:
        """The word pieces of text, without [CLS] and [SEP] (as a tokenizer's tokenize())."""
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str) -> np.ndarray:
        """The unit-length sentence vector of one text (float32)."""
        w = self.weights
        ids = np.asarray(self.tokenizer.encode(text).ids, np.int64)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:len(ids)]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        size = self.dimension // self.heads
        for number in range(self.layers):
            layer = f"encoder.layer.{number}."

            def dense(value: np.ndarray, name: str) -> np.ndarray:
                return value @ w[layer + name + ".weight"].T + w[layer + name + ".bias"]  # noqa: B023 (called in this iteration)

            def split(value: np.ndarray) -> np.ndarray:  # (tokens, hidden) -> (heads, tokens, size)
                return value.reshape(len(ids), self.heads, size).transpose(1, 0, 2)

            query = split(dense(x, "attention.self.query"))
            key = split(dense(x, "attention.self.key"))
            value = split(dense(x, "attention.self.value"))
            scores = query @ key.transpose(0, 2, 1) / np.float32(np.sqrt(size))
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ value).transpose(1, 0, 2).reshape(len(ids), self.dimension)
            x = self._norm(dense(context, "attention.output.dense") + x,
                           layer + "attention.output.LayerNorm")
            x = self._norm(dense(_gelu(dense(x, "intermediate.dense")), "output.dense") + x,
                           layer + "output.LayerNorm")
        pooled = x.mean(0)  # (one text: no padding to mask)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        variance = np.square(x - mean).mean(-1, keepdims=True)
        return ((x - mean) / np.sqrt(variance + np.float32(self.eps))
                * self.weights[name + ".weight"] + self.weights[name + ".bias"])


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), with erf by Abramowitz and Stegun 7.1.26 (error
    under 1.5e-7, float32's own rounding; numpy has no erf)."""
    z = np.abs(x) / np.float32(np.sqrt(2.0))
    t = 1.0 / (1.0 + np.float32(0.3275911) * z)
    poly = t * (np.float32(0.254829592) + t * (np.float32(-0.284496736) + t * (
        np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * np.float32(1.061405429)))))
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    return (x * 0.5 * (1.0 + erf)).astype(np.float32)
