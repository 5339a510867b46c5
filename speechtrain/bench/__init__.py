"""speechtrain.bench."""
