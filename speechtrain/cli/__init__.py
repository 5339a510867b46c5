"""speechtrain.cli."""
