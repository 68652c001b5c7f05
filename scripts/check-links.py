#!/usr/bin/env python3
"""Checks relative links (and #anchors, GitHub style) in the given markdown files."""
import os, re, sys
def anchors(path):
    out, seen = set(), {}
    fence = False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fence = not fence
        if fence: continue
        m = re.match(r'^(#{1,6})\s+(.*?)\s*$', line)
        if not m: continue
        t = m.group(2).strip().lower()
        t = re.sub(r'[^\w\- ]', '', t)   # drop punctuation (keeps letters, digits, _, -, space)
        t = t.replace(' ', '-')
        n = seen.get(t, 0); seen[t] = n + 1
        out.add(t if n == 0 else f'{t}-{n}')
    return out
bad = 0
for f in sys.argv[1:]:
    text = open(f, encoding='utf-8').read()
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    for m in re.finditer(r'\]\(([^)\s]+)\)', text):
        link = m.group(1)
        if re.match(r'^[a-z]+:', link): continue
        path, _, frag = link.partition('#')
        target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(target):
            print(f'{f}: missing {link}'); bad += 1; continue
        if frag:
            if os.path.isdir(target) or not target.endswith('.md'):
                print(f'{f}: anchor on non-markdown {link}'); bad += 1; continue
            if frag not in anchors(target):
                print(f'{f}: no anchor {link}'); bad += 1
print(f'{bad} bad link(s)')
sys.exit(1 if bad else 0)
