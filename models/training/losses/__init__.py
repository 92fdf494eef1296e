"""Training losses written for ctxsim where no library has one (CLRCMD's RCMD)."""
