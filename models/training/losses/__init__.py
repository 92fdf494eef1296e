"""Training losses written for ctxsim where no library has one (CLRCMD's RCMD; MNRL with its
candidates encoded without gradient)."""
