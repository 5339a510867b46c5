"""speechtrain.testing."""
