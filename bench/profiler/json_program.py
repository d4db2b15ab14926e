# The Python JSON program of docs/PERFORMANCE.md ("Call stacks"), as a script: building,
# dumping and parsing a JSON document of 50,000 objects (10.4 M allocations under
# PYTHONMALLOC=malloc). A file, so that Python frames can be recorded (python3 -c runs with
# native frames only).
import json

d = [{'k%d' % i: list(range(20))} for i in range(50000)]
s = json.dumps(d)
json.loads(s)
