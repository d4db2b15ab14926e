# Python frames in call stacks (python_stacks_test.cpp): allocations from known Python lines.
# bytes(N) with N > 512 is one allocation of the C heap (pymalloc serves only up to 512 bytes),
# of 33 + N bytes; each site's count and size are known. alpha runs on the main thread, beta on
# a thread started by the threading module, gamma in a module imported late (after both).
import sys
import threading


def alpha(n):
    keep = [None] * n
    for i in range(n):
        keep[i] = bytes(1000)  # SITE_ALPHA
    return keep


def beta(n, out):
    keep = [None] * n
    for i in range(n):
        keep[i] = bytes(3000)  # SITE_BETA
    out.append(keep)


def main():
    a = alpha(100)
    out = []
    t = threading.Thread(target=beta, args=(50, out))
    t.start()
    t.join()
    import late  # imported late: its code objects are named when it first runs
    c = late.gamma(20)
    return len(a) + len(out[0]) + len(c)


if __name__ == "__main__":
    sys.exit(0 if main() == 170 else 1)
