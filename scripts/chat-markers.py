#!/usr/bin/env python3
"""scripts/chat-markers.py RAW.bin OUT.bin — maps the marker byte tokens of a bonsai-train-lm --tokenize output to the
chat control tokens (make-model.sh, make-skills-model.sh): 0x01 / 0x02 (ids 1, 2) → <|im_start|> (1022) / <|im_end|>
(1023) of the 1024-token vocabularies; prints the token and marker counts."""
import array, sys

raw = array.array('I')
raw.frombytes(open(sys.argv[1], 'rb').read())
ids = array.array('I', [1022 if t == 1 else 1023 if t == 2 else t for t in raw])
open(sys.argv[2], 'wb').write(ids.tobytes())
print(f"tokens: {len(ids)}, {raw.count(1)} <|im_start|>, {raw.count(2)} <|im_end|>")
