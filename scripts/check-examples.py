#!/usr/bin/env python3
"""Lists the library's public items whose documentation has no code example; exits 1 if any.

Reads the HTML that `cargo doc -p redmutex` writes (target/doc/redmutex/) — stable
rustdoc's own output, so the check needs no nightly option — and looks at every page of
an item that needs an example, where rustdoc's own lint (`missing_doc_code_examples`)
would ask for one: functions, structs, enums, unions and traits, the methods of their
inherent impls, and a trait's own methods. Constants, type aliases, modules, fields,
variants, trait impls and methods reached through `Deref` do not need one. An example is
a Rust code block in the docs (rustdoc renders each as `rust-example-rendered`).

Usage: check-examples.py target/doc/redmutex
"""
import os
import re
import sys

PAGES = re.compile(r"^(struct|enum|union|trait|fn)\.[A-Za-z0-9_]+\.html$")
EXAMPLE = "rust-example-rendered"
# Where a page's own inherent methods end: the impls of traits, and Deref's methods.
INHERENT_END = re.compile(
    r'<h2 id="(trait-implementations|synthetic-implementations|blanket-implementations'
    r'|deref-methods[^"]*)"'
)
SECTION = re.compile(r'<section id="((?:ty)?method)\.([A-Za-z0-9_]+)"')


def main_content(html):
    start = html.find('<section id="main-content"')
    return html[start:] if start >= 0 else html


def top_doc(content):
    """The item's own documentation: everything before its first section (fields,
    variants, methods, implementations), whose headings rustdoc marks `section-header`."""
    end = re.search(r'<h2 id="[^"]*" class="section-header"', content)
    return content if end is None else content[:end.start()]


def methods(region):
    """(name, the documentation that follows its signature) for each method in `region`."""
    found = []
    matches = list(re.finditer(r'<section id="', region))
    for i, start in enumerate(matches):
        method = SECTION.match(region, start.start())
        if not method:
            continue
        end = matches[i + 1].start() if i + 1 < len(matches) else len(region)
        found.append((method.group(2), region[start.start():end]))
    return found


def check_page(path, kind):
    with open(path, encoding="utf-8") as f:
        html = f.read()
    if 'http-equiv="refresh"' in html:
        # The page of a private module's item, redirecting to where it is public.
        return [], 0
    content = main_content(html)
    missing = []
    name = os.path.basename(path)[len(kind) + 1:-len(".html")]
    if EXAMPLE not in top_doc(content):
        missing.append(name)
    if kind == "fn":
        return missing, 1
    if kind == "trait":
        end = content.find('<h2 id="implementors"')
        region = content if end < 0 else content[:end]
    else:
        start = content.find('id="implementations-list"')
        if start < 0:
            return missing, 1
        end = INHERENT_END.search(content, start)
        region = content[start:end.start() if end else len(content)]
    checked = 1
    for method, doc in methods(region):
        checked += 1
        if EXAMPLE not in doc:
            missing.append(f"{name}::{method}")
    return missing, checked


def main(root):
    if not os.path.isdir(root):
        print(f"check-examples: no rustdoc output at {root} (run cargo doc first)")
        return 2
    missing, total = [], 0
    for directory, _, files in sorted(os.walk(root)):
        for file in sorted(files):
            page = PAGES.match(file)
            if page:
                path = os.path.join(directory, file)
                lacking, checked = check_page(path, page.group(1))
                where = os.path.relpath(directory, root).replace(os.sep, "::")
                prefix = "" if where == "." else where + "::"
                missing += [prefix + item for item in lacking]
                total += checked
    if total == 0:
        print(f"check-examples: no item pages under {root}")
        return 2
    if missing:
        print(f"{len(missing)} of {total} public items have no code example:")
        for item in missing:
            print(f"  {item}")
        return 1
    print(f"{total} of {total} public items have an example")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "target/doc/redmutex"))
