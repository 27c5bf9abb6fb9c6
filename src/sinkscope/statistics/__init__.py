"""Streaming statistics: each declares its state with its reduction (`state`), folds the events of every forward
pass into it and turns it into table columns (`statistic.Statistic`). The pipeline's `capture.feed.Feed` hands
them the events; checkpoints, merges and the distributed reduction are the same for all of them."""
