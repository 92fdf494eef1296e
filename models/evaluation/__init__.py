"""Measuring similarity: STS and domain metrics with paired bootstrap intervals, the cosine and
RCMD similarities, DynaMax and iSTS alignment."""
