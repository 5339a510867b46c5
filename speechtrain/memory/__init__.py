"""speechtrain.memory."""
