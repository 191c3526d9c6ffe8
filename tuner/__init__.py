"""tuner: hyperparameter tuning service for PyTorch training on Ray Tune."""
__version__ = "0.1.0"
