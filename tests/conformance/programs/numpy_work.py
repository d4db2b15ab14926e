# Some array work with numpy, deterministic (a fixed seed; OPENBLAS_NUM_THREADS=1 is set by the
# test): the conformance suite's numpy program. Prints checksums.
import numpy as np

rng = np.random.default_rng(0)
a = rng.standard_normal((200, 200))
b = a @ a.T + np.eye(200)
print("trace %.6f" % np.trace(b))
print("solve %.6f" % np.linalg.solve(b, np.ones(200)).sum())
parts = [np.sort(rng.integers(0, 1000, size=n)) for n in range(1, 400)]
print("sorted %d" % sum(int(p[-1]) for p in parts))
joined = np.concatenate(parts)
print("unique %d" % np.unique(joined).size)
print("fft %.6f" % np.abs(np.fft.rfft(joined.astype(float))).sum())
words = np.array(["w%d" % i for i in range(5000)])
print("strings %d" % np.char.str_len(words).sum())
