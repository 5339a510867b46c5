"""CNN-LSTM audio classifier on log-mel: 2-D conv front end, bidirectional LSTM, pooled classifier."""
