"""speechtrain.train."""
