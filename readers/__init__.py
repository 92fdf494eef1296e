"""Readers of evaluation data: STS sets (`sts`) and iSTS alignments (`ists`), discovered in
whatever directory a user gives."""
