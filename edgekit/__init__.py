"""edgekit: turn a Hugging Face causal LM into a validated, ready-to-run CPU bundle for edge boxes."""

__version__ = "0.1.0"
