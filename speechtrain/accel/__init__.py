"""speechtrain.accel."""
