"""The longest functions in src/ (outside test modules): a `fn` line to the closing brace at its
indentation. Usage: python3 scripts/fn-lengths.py [REV] [N] — REV a commit (default: the working
tree), N how many to list (default 10). Prints "lines file name" rows, then the counts over 60 and
over 100 lines (docs/findings.md, "Long functions")."""
import re
import subprocess
import sys

FN = re.compile(r'^(\s*)(pub(\([^)]*\))? )?(const )?(async )?(unsafe )?fn (\w+)')


def sources(rev):
    if rev is None:
        files = subprocess.check_output(['git', 'ls-files', '--cached', '--others', '--exclude-standard', 'src'], text=True).split()
        return {f: open(f).read() for f in files if f.endswith('.rs')}
    files = subprocess.check_output(['git', 'ls-tree', '-r', '--name-only', rev, 'src'], text=True).split()
    return {f: subprocess.check_output(['git', 'show', f'{rev}:{f}'], text=True) for f in files if f.endswith('.rs')}


def lengths(path, text):
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith('#[cfg(test)]'):
            return
        m = FN.match(lines[i])
        if m and not lines[i].rstrip().endswith(';'):
            indent, j = m.group(1), i
            while j < len(lines) and lines[j] != indent + '}':
                j += 1
            yield j - i + 1, path, m.group(7)
            i = j
        i += 1


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    found = sorted((x for path, text in sources(rev).items() for x in lengths(path, text)), reverse=True)
    for count, path, name in found[:n]:
        print(count, path, name)
    print('over 60 lines:', sum(c > 60 for c, _, _ in found), '· over 100:', sum(c > 100 for c, _, _ in found))


main()
