"""A Hugging Face GPT-2 built from a config (nothing downloaded), as a dtgen python model.

dtgen trains it as it is: `input: tokens` in spec.yaml makes the text and synthetic
token datasets feed it token ids [batch, seq_len], and the default loss reads the
`.logits` of the ModelOutput it returns. No wrapper, nothing dtgen-specific here.

Needs the optional extra: pip install 'dtgen[hf]' (transformers).
"""

import os

# Built from a config: nothing is fetched. Offline mode makes any accidental hub access
# (a from_pretrained added later) fail at once instead of waiting on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def build(vocab: int = 256, seq_len: int = 32, layers: int = 2, d_model: int = 64, heads: int = 4):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab, n_positions=seq_len, n_embd=d_model, n_layer=layers, n_head=heads,
        # No dropout: every rank would draw its own masks, and a data-parallel step
        # would no longer equal one step of `single` on the global batch.
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        use_cache=False,  # training: no key/value cache in the output
        bos_token_id=vocab - 1, eos_token_id=vocab - 1,  # GPT-2's 50256 lies outside a small vocab
    )
    return GPT2LMHeadModel(config)
