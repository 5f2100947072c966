"""The models: the registry of names, the language models, ``hf:`` models and local
architectures."""
