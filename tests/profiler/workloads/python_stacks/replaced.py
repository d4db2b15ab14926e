# A program that replaces the profile function (python_stacks_test.cpp): the shadow stack is not
# read from then on (its frames may be gone); the allocations are recorded with native frames.
import sys


def allocate(n, size):
    keep = [None] * n
    for i in range(n):
        keep[i] = bytes(size)  # SITE_ALLOCATE
    return keep


def main():
    a = allocate(10, 2000)
    sys.setprofile(lambda frame, event, arg: None)
    b = allocate(10, 4000)  # SITE_AFTER_CALL
    sys.setprofile(None)
    return len(a) + len(b)


if __name__ == "__main__":
    sys.exit(0 if main() == 20 else 1)
