# Imported late by main.py (python_stacks_test.cpp).
def gamma(n):
    keep = [None] * n
    for i in range(n):
        keep[i] = bytes(7000)  # SITE_GAMMA
    return keep
