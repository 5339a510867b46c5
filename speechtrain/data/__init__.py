"""speechtrain.data."""
