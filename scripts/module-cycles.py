#!/usr/bin/env python3
"""Reports circles between sibling modules in each crate's `src` (issue 22).

For every crate under crates/, the module tree is read from the `mod` declarations of each crate
root (src/lib.rs, src/main.rs), inline `mod x { … }` blocks included. Every `crate::…`,
`super::…` and `self::…` path (in `use` trees and in code; comments and strings are skipped) is
resolved to the module it names, following `pub use` re-exports. A path from module A to module
B is an arrow between the two children of their closest common ancestor that hold A and B: a
child using its parent's own items, or a parent using its child, is no arrow. A circle is a set
of siblings that reach each other (a strongly connected component of more than one module).

Test modules (`#[cfg(test)] mod …`) are left out: a test may use a sibling's fixtures without
the library depending on it. `--with-tests` counts them too.

Usage: module-cycles.py [--allow FILE] [--with-tests] [CRATE_DIR…]   (default: every crates/*)
       module-cycles.py --self-test   (finds the circle of a small crate made for the test)
The allow-list names known circles, one per line, as printed (`crate: parent::{a, b}`); `#`
starts a comment. Exit status 1 if any circle is not allowed, or an allowed one is gone (so the
list cannot go stale).
"""
import os, re, sys

IDENT = r'[A-Za-z_][A-Za-z0-9_]*'
# A `mod` right after `#[cfg(test)]` (other attributes and `pub` between allowed).
TEST_ONLY = re.compile(r'#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?$')


def strip(text):
    """Blanks comments, string and char literals (newlines kept, so offsets stay)."""
    out, i, n = [], 0, len(text)
    blank = lambda s: re.sub(r'[^\n]', ' ', s)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
        elif text.startswith('/*', i):
            j, depth = i + 2, 1
            while j < n and depth:
                if text.startswith('/*', j):
                    depth, j = depth + 1, j + 2
                elif text.startswith('*/', j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
        elif m := re.compile(r'b?r(#*)"').match(text, i):
            if i and re.match(r'\w', text[i - 1]):
                out.append(c); i += 1; continue
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
        elif c == '"' or (c == 'b' and text.startswith('b"', i) and not re.match(r'\w', text[i - 1:i] or ' ')):
            j = i + (2 if c == 'b' else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            j += 1
        elif c == "'":
            if m := re.compile(r"'(\\.[^']*|[^\\'])'").match(text, i):
                j = m.end()
            else:
                out.append(c); i += 1; continue
        else:
            out.append(c); i += 1; continue
        out.append(blank(text[i:j]))
        i = j
    return ''.join(out)


class Module:
    def __init__(self, path, file, text, start, end):
        self.path, self.file = path, file
        self.text, self.start, self.end = text, start, end
        self.cut = []         # (start, end) in the module's text: test modules left out
        self.reexports = {}   # name -> absolute path (tuple of segments)
        self.globs = []       # absolute module paths glob re-exported
        self.defines = set()


def parse_use_tree(tree):
    """Expands `a::{b, c::{d, e as f}}` into [(segments, alias)]."""
    tree = re.sub(r'\s*(::|[{},])\s*', r'\1', tree.strip())
    out = []

    def walk(prefix, s):
        depth, parts, cur = 0, [], ''
        for ch in s:
            if ch == ',' and depth == 0:
                parts.append(cur); cur = ''
                continue
            depth += ch == '{'
            depth -= ch == '}'
            cur += ch
        parts.append(cur)
        for p in filter(None, parts):
            if '{' in p:
                head, _, rest = p.partition('{')
                walk(prefix + [x for x in head.split('::') if x], rest[:rest.rfind('}')])
            else:
                p, _, alias = p.partition(' as ')
                segs = prefix + [x for x in p.split('::') if x]
                out.append((segs, alias.strip() or segs[-1]))
    walk([], tree)
    return out


class Crate:
    def __init__(self, root_file, tests):
        self.tests = tests
        self.modules = {}
        self.load((), root_file)

    def load(self, path, file):
        text = strip(open(file, encoding='utf-8').read())
        self.add(path, file, text, 0, len(text))

    def add(self, path, file, text, start, end):
        mod = Module(path, file, text, start, end)
        self.modules[path] = mod
        body = text[start:end]
        depth, skip = 0, 0
        for m in re.finditer(r'[{}]|\bmod\s+(' + IDENT + r')\s*([;{])', body):
            if m.start() < skip:
                continue
            if m.group(1) and not self.tests and TEST_ONLY.search(body[:m.start()]):
                if m.group(2) == '{':
                    skip = self.matching(text, start + m.end() - 1) + 1 - start
                    mod.cut.append((m.start(), skip))
                continue
            if m.group(0) in '{}':
                depth += 1 if m.group(0) == '{' else -1
            elif depth == 0 and m.group(2) == ';':
                self.load(path + (m.group(1),), self.child_file(file, path, m.group(1)))
            elif depth == 0:
                close = self.matching(text, start + m.end() - 1)
                self.add(path + (m.group(1),), file, text, start + m.end(), close)
                skip = close + 1 - start
        self.scan_items(mod)

    @staticmethod
    def matching(text, open_at):
        depth = 0
        for j in range(open_at, len(text)):
            depth += text[j] == '{'
            depth -= text[j] == '}'
            if depth == 0:
                return j
        return len(text)

    def child_file(self, file, path, name):
        base = os.path.basename(file)
        if base in ('mod.rs', 'lib.rs', 'main.rs'):
            d = os.path.dirname(file)
        else:
            d = os.path.join(os.path.dirname(file), base[:-3])
        for cand in (os.path.join(d, name + '.rs'), os.path.join(d, name, 'mod.rs')):
            if os.path.exists(cand):
                return cand
        sys.exit(f'{file}: no file for `mod {name}`')

    def own_text(self, mod):
        """The module's text without its inline child modules."""
        text = mod.text[mod.start:mod.end]
        cut = list(mod.cut)
        for child in self.modules.values():
            if child.path[:-1] == mod.path and child.file == mod.file and child.start > mod.start:
                cut.append((child.start - mod.start, child.end - mod.start))
        for a, b in cut:
            text = text[:a] + ' ' * (b - a) + text[b:]
        return text

    def scan_items(self, mod):
        text = mod.text[mod.start:mod.end]
        kw = r'\bpub(?:\([^)]*\))?\s+(?:unsafe\s+)?(?:extern\s+"?\w*"?\s*)?'
        for m in re.finditer(kw + r'(?:struct|enum|fn|trait|type|const|static|union|mod)\s+(' + IDENT + ')', text):
            mod.defines.add(m.group(1))
        mod.pending = [parse_use_tree(m.group(1)) for m in re.finditer(r'\bpub(?:\([^)]*\))?\s+use\s+([^;]+);', text)]

    def absolute(self, mod_path, segs):
        """Makes a path absolute; None for paths into other crates or the prelude."""
        segs = list(segs)
        if not segs:
            return None
        if segs[0] == 'crate':
            base, segs = (), segs[1:]
        elif segs[0] in ('self', 'super'):
            base = mod_path
            while segs and segs[0] in ('self', 'super'):
                base = base[:-1] if segs.pop(0) == 'super' else base
        elif mod_path + (segs[0],) in self.modules:
            base = mod_path   # a child module named without `self::`
        else:
            return None
        return tuple(base) + tuple(segs)

    def finish(self):
        for mod in self.modules.values():
            for tree in mod.pending:
                for segs, alias in tree:
                    target = self.absolute(mod.path, segs)
                    if target is None:
                        continue
                    if alias == '*':
                        mod.globs.append(target[:-1])
                    else:
                        mod.reexports[alias] = target

    def resolve(self, path, seen=None):
        """The module an absolute path lands in (re-exports followed)."""
        seen = seen or set()
        mod = ()
        for k, seg in enumerate(path):
            if mod + (seg,) in self.modules:
                mod = mod + (seg,)
                continue
            m = self.modules[mod]
            target = m.reexports.get(seg)
            if target is None and seg not in m.defines:
                for g in m.globs:
                    if g in self.modules and (seg in self.modules[g].defines or seg in self.modules[g].reexports):
                        target = g + (seg,)
                        break
            if target is not None and target not in seen:
                seen.add(target)
                return self.resolve(target + tuple(path[k + 1:]), seen)
            return mod
        return mod

    def arrows(self):
        """{parent: {(a, b): 'file:line'}} for every arrow between siblings."""
        out = {}
        path_re = re.compile(r'(?<![\w:])((?:crate|super|self)(?:\s*::\s*' + IDENT + r')+)')
        use_re = re.compile(r'\buse\s+([^;]+);')
        for mod in self.modules.values():
            text = self.own_text(mod)
            refs = [(m.start(), re.sub(r'\s', '', m.group(1)).split('::')) for m in path_re.finditer(text)]
            for m in use_re.finditer(text):
                refs += [(m.start(), segs) for segs, _ in parse_use_tree(m.group(1))]
            for pos, segs in refs:
                target = self.absolute(mod.path, [s for s in segs if s != '*'])
                if target is None:
                    continue
                self.arrow(out, mod, self.resolve(target), pos)
        return out

    def arrow(self, out, mod, target, pos):
        src = mod.path
        k = 0
        while k < min(len(src), len(target)) and src[k] == target[k]:
            k += 1
        if k == len(src) or k == len(target):
            return   # a module and its ancestor: no arrow between siblings
        line = mod.text.count('\n', 0, mod.start + pos) + 1
        where = f'{os.path.relpath(mod.file)}:{line}'
        out.setdefault(src[:k], {}).setdefault((src[k], target[k]), where)


def circles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def crate_circles(crate_dir, tests):
    name = os.path.basename(os.path.normpath(crate_dir))
    src = os.path.join(crate_dir, 'src')
    for root in ('lib.rs', 'main.rs'):
        if not os.path.exists(os.path.join(src, root)):
            continue
        crate = Crate(os.path.join(src, root), tests)
        crate.finish()
        for parent, edges in sorted(crate.arrows().items()):
            for comp in circles(edges):
                label = '::'.join(parent) or ('crate' if root == 'lib.rs' else 'main')
                key = f'{name}: {label}::{{{", ".join(comp)}}}'
                proof = [f'    {a} -> {b}  ({w})' for (a, b), w in sorted(edges.items())
                         if a in comp and b in comp]
                yield key, proof


SELF_TEST = {
    # a -> b through the root's re-export, b -> a through a grouped use: one circle. a -> c, and
    # c -> a only in c's tests. Uses of an ancestor's own items, comments and strings: no arrow.
    'src/lib.rs': 'mod a;\nmod b;\nmod c;\npub use b::Thing;\npub fn top() {}\n',
    'src/a.rs': 'use crate::Thing; // crate::b::x\npub fn f() { crate::c::d::h() }\n',
    'src/b.rs': 'use super::{a::f, a as other};\npub struct Thing;\nconst S: &str = "crate::c";\n',
    'src/c/mod.rs': 'pub mod d;\nuse super::top;\n#[cfg(test)]\nmod tests {\n    use crate::a::f;\n}\n',
    'src/c/d.rs': 'use super::super::top;\npub fn h() {}\n',
}


def self_test():
    """The script finds the one circle of a small crate, and only it."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for path, text in SELF_TEST.items():
            os.makedirs(os.path.dirname(os.path.join(d, 'x', path)), exist_ok=True)
            open(os.path.join(d, 'x', path), 'w').write(text)
        found = [k for k, _ in crate_circles(os.path.join(d, 'x'), False)]
        with_tests = [k for k, _ in crate_circles(os.path.join(d, 'x'), True)]
    assert found == ['x: crate::{a, b}'], found
    assert with_tests == ['x: crate::{a, b, c}'], with_tests
    print('module-cycles: self-test passed')


def main(argv):
    if argv == ['--self-test']:
        return self_test()
    allow_file, tests = None, False
    while argv[:1] in (['--allow'], ['--with-tests']):
        if argv[0] == '--allow':
            allow_file, argv = argv[1], argv[2:]
        else:
            tests, argv = True, argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = argv or sorted(os.path.join(here, '..', 'crates', d) for d in os.listdir(os.path.join(here, '..', 'crates')))
    allowed = set()
    if allow_file:
        for line in open(allow_file, encoding='utf-8'):
            line = line.split('#', 1)[0].strip()
            if line:
                allowed.add(line)
    bad, seen = 0, set()
    for d in dirs:
        for key, proof in crate_circles(d, tests):
            seen.add(key)
            tag = 'allowed circle' if key in allowed else 'circle'
            print(f'{tag}: {key}')
            print('\n'.join(proof))
            bad += key not in allowed
    for key in sorted(allowed - seen):
        print(f'allow-list names a circle that is gone (remove it): {key}')
        bad += 1
    print(f'module-cycles: {bad} problem(s) in {len(dirs)} crate(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
