//! The guard of function length: no function in the host, the SDK or the SDK's macros spans more
//! than [`LIMIT`] lines, so each reads as a pipeline of named steps. This test parses every `.rs`
//! file under the roots below with `syn` and fails listing each `fn` (free, inherent or trait impl,
//! trait default, nested) longer than the limit. Test code is exempt: `#[cfg(test)]` items and
//! modules (inline or in their own file), `#[test]` functions, and the crates' `tests/` folders,
//! which the walk does not enter.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::visit::{self, Visit};

/// The most lines a function may span, from `fn` to its closing brace.
const LIMIT: usize = 80;

/// The source folders checked, relative to the workspace root. (`host/benches`, measurement
/// harnesses, is not checked yet: nine of its functions are longer.)
const ROOTS: &[&str] = &["host/src", "plugin-sdk/src", "plugin-sdk/macros/src"];

/// One function over the limit.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct LongFn {
    file: String,
    line: usize,
    name: String,
    lines: usize,
}

/// Whether attributes mark test-only code: `#[test]`, or `#[cfg(…)]` whose predicate holds only
/// under test (`test`, or `all(…)` with such a part).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        path.is_ident("test")
            || (path.is_ident("cfg")
                && attr
                    .parse_args::<syn::Meta>()
                    .is_ok_and(|predicate| holds_only_under_test(&predicate)))
    })
}

/// Whether a `cfg` predicate implies `test`.
fn holds_only_under_test(predicate: &syn::Meta) -> bool {
    match predicate {
        syn::Meta::Path(path) => path.is_ident("test"),
        syn::Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|parts| parts.iter().any(holds_only_under_test)),
        _ => false,
    }
}

/// Walks one parsed file, collecting long functions and the `#[cfg(test)] mod x;` files it names.
struct Walk<'a> {
    file: &'a str,
    /// The enclosing `impl`/`trait` type, to name methods `Type::method`.
    owner: Option<String>,
    long: Vec<LongFn>,
    /// Modules declared test-only whose body lives in another file.
    test_modules: Vec<String>,
}

impl Walk<'_> {
    /// Records a function spanning `first..=last` if it is over the limit.
    fn measure(&mut self, name: &syn::Ident, first: usize, last: usize) {
        let lines = last + 1 - first;
        if lines > LIMIT {
            let name = match &self.owner {
                Some(owner) => format!("{owner}::{name}"),
                None => name.to_string(),
            };
            self.long.push(LongFn {
                file: self.file.to_owned(),
                line: first,
                name,
                lines,
            });
        }
    }

    /// Visits items under `owner` (an `impl` or `trait` type), restoring the outer one after.
    fn within(&mut self, owner: String, visit: impl FnOnce(&mut Self)) {
        let outer = self.owner.replace(owner);
        visit(self);
        self.owner = outer;
    }
}

/// The first and last line of a function: from `fn` (or its first qualifier) to the closing brace.
fn span_lines(sig: &syn::Signature, block: &syn::Block) -> (usize, usize) {
    let first = sig
        .constness
        .map(|t| t.span)
        .or(sig.asyncness.map(|t| t.span))
        .or(sig.unsafety.map(|t| t.span))
        .unwrap_or(sig.fn_token.span)
        .start()
        .line;
    (first, block.brace_token.span.close().end().line)
}

/// A type's last path segment (`Loader` for `crate::plugins::Loader<T>`), or its tokens.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(path) => path
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        _ => "_".to_owned(),
    }
}

impl<'ast> Visit<'ast> for Walk<'_> {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if is_test_only(&module.attrs) {
            if module.content.is_none() {
                self.test_modules.push(module.ident.to_string());
            }
            return;
        }
        visit::visit_item_mod(self, module);
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if is_test_only(&item.attrs) {
            return;
        }
        let (first, last) = span_lines(&item.sig, &item.block);
        self.measure(&item.sig.ident, first, last);
        // A nested fn is named on its own, not under an enclosing impl's type.
        let outer = self.owner.take();
        visit::visit_item_fn(self, item);
        self.owner = outer;
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if is_test_only(&item.attrs) {
            return;
        }
        self.within(type_name(&item.self_ty), |walk| {
            visit::visit_item_impl(walk, item)
        });
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        if is_test_only(&item.attrs) {
            return;
        }
        self.within(item.ident.to_string(), |walk| {
            visit::visit_item_trait(walk, item)
        });
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if is_test_only(&item.attrs) {
            return;
        }
        let (first, last) = span_lines(&item.sig, &item.block);
        self.measure(&item.sig.ident, first, last);
        let outer = self.owner.take();
        visit::visit_impl_item_fn(self, item);
        self.owner = outer;
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if is_test_only(&item.attrs) {
            return;
        }
        if let Some(block) = &item.default {
            let (first, last) = span_lines(&item.sig, block);
            self.measure(&item.sig.ident, first, last);
        }
        let outer = self.owner.take();
        visit::visit_trait_item_fn(self, item);
        self.owner = outer;
    }
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The files a module `name` declared in `parent` may live in (`name.rs`, `name/mod.rs`).
fn module_files(parent: &Path, name: &str) -> [PathBuf; 2] {
    let dir = parent.parent().unwrap_or(Path::new(""));
    let stem = parent.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    // `lib.rs`, `main.rs` and `mod.rs` declare children beside them; `a.rs` declares them in `a/`.
    let base = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
}

/// Every function over [`LIMIT`] in the files under `roots` (relative to `base`), outside test
/// code, and the files that could not be read or parsed.
fn long_functions(base: &Path, roots: &[&str]) -> (Vec<LongFn>, Vec<String>) {
    let mut files: Vec<PathBuf> = roots
        .iter()
        .flat_map(|root| rust_files(&base.join(root)))
        .collect();
    files.sort();
    let mut test_files = BTreeSet::new();
    let mut long = Vec::new();
    let mut unreadable = Vec::new();
    // Parse everything first: a parent names its test-only module files before they are judged.
    let mut parsed = Vec::new();
    for file in files {
        let shown = file
            .strip_prefix(base)
            .unwrap_or(&file)
            .display()
            .to_string();
        let syntax = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|text| syn::parse_file(&text).map_err(|e| e.to_string()));
        match syntax {
            Ok(syntax) => parsed.push((file, shown, syntax)),
            Err(error) => unreadable.push(format!("{shown}: {error}")),
        }
    }
    for (file, shown, syntax) in &parsed {
        let mut walk = Walk {
            file: shown,
            owner: None,
            long: Vec::new(),
            test_modules: Vec::new(),
        };
        walk.visit_file(syntax);
        for name in &walk.test_modules {
            test_files.extend(module_files(file, name));
        }
        long.extend(walk.long.into_iter().map(|f| (file.clone(), f)));
    }
    let mut long: Vec<LongFn> = long
        .into_iter()
        .filter(|(file, _)| !test_files.contains(file))
        .map(|(_, f)| f)
        .collect();
    long.sort();
    (long, unreadable)
}

#[test]
fn no_function_is_longer_than_the_limit() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate sits in the workspace");
    let (long, unreadable) = long_functions(workspace, ROOTS);
    assert!(
        unreadable.is_empty(),
        "files not parsed:\n{}",
        unreadable.join("\n")
    );
    let listed: Vec<String> = long
        .iter()
        .map(|f| format!("{}:{}: {} ({} lines)", f.file, f.line, f.name, f.lines))
        .collect();
    assert!(
        long.is_empty(),
        "{} functions span more than {LIMIT} lines (split each into named steps):\n{}",
        long.len(),
        listed.join("\n")
    );
}

#[test]
fn the_guard_sees_every_kind_of_function_and_skips_test_code() {
    let body = "    let _ = 1;\n".repeat(LIMIT);
    let source = format!(
        "fn free() {{\n{body}}}\n\
         fn short() {{}}\n\
         struct S;\n\
         impl S {{\n    pub async fn method(&self) {{\n{body}    }}\n}}\n\
         trait T {{\n    fn provided(&self) {{\n{body}    }}\n    fn required(&self);\n}}\n\
         fn outer() {{\n    fn nested() {{\n{body}    }}\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn helper() {{\n{body}    }}\n}}\n\
         #[test]\nfn a_test() {{\n{body}}}\n\
         #[cfg(all(test, unix))]\nfn unix_test_helper() {{\n{body}}}\n\
         #[cfg(not(test))]\nfn production_only() {{\n{body}}}\n\
         #[cfg(any(test, feature = \"testing\"))]\nfn shipped_kit() {{\n{body}}}\n\
         #[cfg(test)]\nmod split;\n"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("crate/src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("lib.rs"), &source).expect("write lib.rs");
    // The test-only module's own file is exempt as a whole.
    std::fs::write(
        src.join("split.rs"),
        format!("fn in_split() {{\n{body}}}\n"),
    )
    .expect("write split.rs");
    let (long, unreadable) = long_functions(dir.path(), &["crate/src"]);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let named: Vec<(&str, usize)> = long.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    let span = LIMIT + 2;
    assert_eq!(
        named,
        [
            ("free", span),
            ("S::method", span),
            ("T::provided", span),
            ("outer", span + 2),
            ("nested", span),
            ("production_only", span),
            ("shipped_kit", span),
        ]
    );
}
