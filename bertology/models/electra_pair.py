"""ELECTRA's two networks (Clark et al., 2020): a small masked-LM generator and the
discriminator that labels every token original or replaced, trained together.

They share the embeddings (token, position and segment: ELECTRA §3.2, "we share the
embeddings"), so the generator keeps the discriminator's embedding size and projects it to its
own, narrower hidden size (HF's `embeddings_project`). Both are plain transformers models:
`model/` holds the discriminator (ElectraForPreTraining), `generator/` the generator
(ElectraForMaskedLM).
"""

from __future__ import annotations

from torch import nn
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining


def electra_configs(vocab_size: int, pad_token_id: int, layers: int, hidden: int, heads: int,
                    intermediate: int, max_positions: int, generator_fraction: float,
                    dropout: float, attention_dropout: float) -> tuple[ElectraConfig, ...]:
    """(discriminator, generator) configs. The generator is `generator_fraction` as wide
    (ELECTRA §3.2, Fig. 3: 1/4 to 1/2 of the discriminator works best), equally deep."""
    common = dict(vocab_size=vocab_size, pad_token_id=pad_token_id, embedding_size=hidden,
                  num_hidden_layers=layers, max_position_embeddings=max_positions,
                  type_vocab_size=2, hidden_dropout_prob=dropout,
                  attention_probs_dropout_prob=attention_dropout)
    discriminator = ElectraConfig(hidden_size=hidden, num_attention_heads=heads,
                                  intermediate_size=intermediate, **common)
    gen_heads = max(1, round(heads * generator_fraction))
    gen_hidden = max(gen_heads, round(hidden * generator_fraction / gen_heads) * gen_heads)
    generator = ElectraConfig(hidden_size=gen_hidden, num_attention_heads=gen_heads,
                              intermediate_size=4 * gen_hidden, **common)
    return discriminator, generator


class ElectraPair(nn.Module):
    """Generator and discriminator as one module, so one optimizer trains both and one
    checkpoint (safetensors, shared tensors once) holds both."""

    def __init__(self, discriminator: ElectraForPreTraining, generator: ElectraForMaskedLM):
        super().__init__()
        self.discriminator, self.generator = discriminator, generator
        generator.electra.embeddings = discriminator.electra.embeddings
        # The generator's output layer stays tied to the (now shared) input embeddings.
        generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight

    @property
    def config(self) -> ElectraConfig:
        """The discriminator's: it is the model the run is about."""
        return self.discriminator.config


def build_electra_pair(discriminator_config: ElectraConfig, generator_config: ElectraConfig,
                       attn_implementation: str) -> ElectraPair:
    discriminator = ElectraForPreTraining._from_config(discriminator_config,
                                                       attn_implementation=attn_implementation)
    generator = ElectraForMaskedLM._from_config(generator_config,
                                                attn_implementation=attn_implementation)
    return ElectraPair(discriminator, generator)
