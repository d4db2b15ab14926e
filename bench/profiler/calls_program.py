# Python frames' worst case (docs/PERFORMANCE.md, "Python frames"): a Python call for every
# allocation or two, so that the profile function's cost on each call and return shows.
# 1.5 M Python calls; under PYTHONMALLOC=malloc about 3 M allocations.


def leaf(i):
    return [i, i + 1]


def middle(i):
    return leaf(i) + leaf(i + 1)


def main():
    total = 0
    for i in range(500000):
        total += len(middle(i))
    return total


main()
