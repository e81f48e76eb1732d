"""Framework callbacks that run the gpulens.torch tracker inside a training loop: Hugging Face
(`gpulens.integrations.hf`), Lightning (`.lightning`) and Keras 3 (`.keras`). Each module
needs its framework; each callback takes `job=` and `data_dir=` like `gpulens.torch.track`.
"""
