"""speechtrain.models."""
