# An allocation-heavy Python script: dicts, lists, strings, JSON, objects.
# Prints figures that must be identical with and without kennel.
import collections
import json
import random

random.seed(1)
data = {f"key{i}": [i, str(i) * (i % 7), {"v": i, "w": [i] * (i % 5)}] for i in range(150_000)}
text = json.dumps(data)
back = json.loads(text)
counts = collections.Counter(str(random.randint(0, 5000)) for _ in range(300_000))
print(len(text), len(back), counts.most_common(3), sorted(back)[:3])


class Node:
    __slots__ = ("value", "next")

    def __init__(self, value, next):
        self.value = value
        self.next = next


head = None
for i in range(300_000):
    head = Node(i, head)
total = 0
while head:
    total += head.value
    head = head.next
print(total, sum(len(s) for s in (str(x) * 3 for x in range(100_000))))
