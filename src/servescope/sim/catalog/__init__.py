"""The catalogue: models (architecture facts and parameter counts), GPUs (datasheet figures), and the
mapping of a Hugging Face config.json to a model."""
