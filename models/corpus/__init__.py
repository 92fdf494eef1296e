"""From a corpus to what gets labelled: sentences in reading order, TF-IDF candidate contexts,
diverse context sets Cs and the sentence pairs (stages shard, retrieve, select, pairs)."""
