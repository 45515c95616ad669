//! Expansion of `#[tool]` (free functions) and `#[service]` (impl blocks).
//!
//! Each tool becomes a `ToolSpec`: a descriptor function (argument struct -> schema via schemars, doc
//! comment -> descriptions) and a handler (JSON -> argument struct -> the user's function -> result).
//! Both live inside one block with the generated argument struct, so nothing leaks into the user's
//! namespace except, for a free function, a braced struct named after it (type namespace only).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{
    Attribute, Expr, FnArg, GenericArgument, Ident, ImplItem, Item, ItemFn, ItemImpl, LitStr, Pat,
    PathArguments, ReturnType, Signature, Type, Visibility, spanned::Spanned,
};

use crate::docs;

/// Options of `#[tool(...)]`.
#[derive(Default)]
struct ToolOptions {
    name: Option<LitStr>,
    title: Option<LitStr>,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open_world: bool,
    inline: bool,
    input_schema: Option<Expr>,
    meta: Option<Expr>,
    client_capabilities: Option<Expr>,
    /// `task` (optional) or `task = "optional" | "required"`: the tool may run as a task.
    task: Option<Ident>,
    /// `ask_first`: the tool asks its questions before it becomes a task (`ctx.start_task()`).
    ask_first: Option<Span>,
    /// `#[tool(skip)]`: a `pub fn` of a service that is a helper, not a tool.
    skip: Option<Span>,
    /// `filter` (set by `#[filter]`): a result filter, not a tool.
    filter: bool,
}

impl ToolOptions {
    fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let mut opts = ToolOptions::default();
        if tokens.is_empty() {
            return Ok(opts);
        }
        let mut others = 0usize;
        let parser = syn::meta::parser(|meta| {
            if meta.path.is_ident("skip") {
                opts.skip = Some(meta.path.span());
                return Ok(());
            }
            others += 1;
            let key = meta
                .path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            match key.as_str() {
                "name" => opts.name = Some(string_value(&meta, "name = \"my_tool\"")?),
                "title" => opts.title = Some(string_value(&meta, "title = \"My tool\"")?),
                "read_only" => opts.read_only = true,
                "destructive" => opts.destructive = true,
                "idempotent" => opts.idempotent = true,
                "open_world" => opts.open_world = true,
                "inline" => opts.inline = true,
                "input_schema" => opts.input_schema = Some(meta.value()?.parse()?),
                "meta" => opts.meta = Some(meta.value()?.parse()?),
                "client_capabilities" => opts.client_capabilities = Some(meta.value()?.parse()?),
                "task" => opts.task = Some(task_support(&meta)?),
                "ask_first" => opts.ask_first = Some(meta.path.span()),
                "filter" => opts.filter = true,
                _ => {
                    return Err(meta.error(
                        "unknown #[tool] option; expected one of: name, title, read_only, \
                         destructive, idempotent, open_world, inline, input_schema, meta, \
                         client_capabilities, task, ask_first, skip",
                    ));
                }
            }
            Ok(())
        });
        syn::parse::Parser::parse2(parser, tokens)?;
        if let Some(span) = opts.ask_first
            && opts.task.is_none()
        {
            return Err(syn::Error::new(
                span,
                "`ask_first` is for tools that run as tasks: add `task` (or `task = \"required\"`)",
            ));
        }
        if let Some(task) = opts.task.as_ref().filter(|_| opts.inline) {
            return Err(syn::Error::new(
                task.span(),
                "a task tool cannot be `inline`: `inline` promises a quick call, a task is for \
                 long-running work",
            ));
        }
        if let Some(span) = opts.skip
            && others > 0
        {
            return Err(syn::Error::new(
                span,
                "#[tool(skip)] takes no other options: a skipped method is not a tool",
            ));
        }
        Ok(opts)
    }
}

/// The task support of `task` (optional) or `task = "optional" | "required"`, as the name of a
/// `TaskSupport` variant.
fn task_support(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<Ident> {
    let span = meta.path.span();
    if !meta.input.peek(syn::Token![=]) {
        return Ok(Ident::new("Optional", span));
    }
    let value = string_value(meta, "task = \"required\"")?;
    match value.value().as_str() {
        "optional" => Ok(Ident::new("Optional", value.span())),
        "required" => Ok(Ident::new("Required", value.span())),
        _ => Err(syn::Error::new(
            value.span(),
            "expected task = \"optional\" or task = \"required\" (or just `task`, which is optional)",
        )),
    }
}

/// The string literal after `key =` in an attribute, or an error showing `example`.
pub(crate) fn string_value(
    meta: &syn::meta::ParseNestedMeta<'_>,
    example: &str,
) -> syn::Result<LitStr> {
    let value = meta.value()?;
    let span = value.span();
    value
        .parse::<LitStr>()
        .map_err(|_| syn::Error::new(span, format!("expected a string literal: {example}")))
}

/// The first token of an item after its attributes and visibility: its keyword, where errors
/// about the item as a whole point.
pub(crate) fn item_keyword_span(tokens: &TokenStream) -> Span {
    use proc_macro2::{Delimiter, TokenTree};
    let mut iter = tokens.clone().into_iter().peekable();
    while let Some(token) = iter.next() {
        match &token {
            TokenTree::Punct(p) if p.as_char() == '#' => {
                // `#[...]` (or `#![...]`): skip the bracketed group.
                if matches!(iter.peek(), Some(TokenTree::Punct(b)) if b.as_char() == '!') {
                    iter.next();
                }
                iter.next();
            }
            TokenTree::Ident(i) if i == "pub" => {
                if matches!(iter.peek(), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis)
                {
                    iter.next();
                }
            }
            other => return other.span(),
        }
    }
    Span::call_site()
}

/// What to add to an error about a service method: it may be a helper rather than a tool.
pub(crate) fn helper_hint(service: Option<&Type>) -> &'static str {
    if service.is_some() {
        "; if this `pub fn` is a helper rather than a tool, mark it #[tool(skip)]"
    } else {
        ""
    }
}

/// Options of `#[arg(...)]` on a parameter.
#[derive(Default)]
pub(crate) struct ArgOptions {
    pub(crate) default: Option<Expr>,
    pub(crate) min: Option<Expr>,
    pub(crate) max: Option<Expr>,
    pub(crate) header: Option<LitStr>,
    /// `complete = path`: the completion function of a prompt argument or template variable.
    pub(crate) complete: Option<(Span, Expr)>,
}

pub(crate) enum Param {
    Arg {
        ident: Ident,
        ty: Box<Type>,
        opts: Box<ArgOptions>,
    },
    /// `#[args] x: T`: a struct whose fields are the tool's arguments (its schema is the root).
    Whole {
        ty: Box<Type>,
        span: Span,
    },
    Caller {
        optional: bool,
    },
    Context,
    Host,
}

/// Take the `#[args]` attribute off a parameter: its span, if it was there.
fn take_args_marker(attrs: &mut Vec<Attribute>) -> syn::Result<Option<Span>> {
    let mut found = None;
    let mut err = None;
    attrs.retain(|attr| {
        if !attr.path().is_ident("args") {
            return true;
        }
        if !matches!(attr.meta, syn::Meta::Path(_)) {
            err.get_or_insert_with(|| {
                syn::Error::new(
                    attr.meta.span(),
                    "#[args] takes no options: bounds and defaults go on the struct's fields \
                     (#[schemars(range(min = 1, max = 10))], #[serde(default)])",
                )
            });
        }
        found = Some(attr.path().span());
        false
    });
    match err {
        Some(e) => Err(e),
        None => Ok(found),
    }
}

pub(crate) fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

pub(crate) fn is_named(ty: &Type, name: &str) -> bool {
    last_segment(ty).is_some_and(|s| s.ident == name)
}

pub(crate) fn generic_arg(seg: &syn::PathSegment, index: usize) -> Option<&Type> {
    match &seg.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .nth(index),
        _ => None,
    }
}

/// Take the `#[arg(...)]` attributes off a parameter.
pub(crate) fn take_arg_options(attrs: &mut Vec<Attribute>) -> syn::Result<ArgOptions> {
    let mut opts = ArgOptions::default();
    let mut err = None;
    attrs.retain(|attr| {
        if !attr.path().is_ident("arg") {
            return true;
        }
        let res = attr.parse_nested_meta(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            match key.as_str() {
                "default" => opts.default = Some(meta.value()?.parse()?),
                "min" => opts.min = Some(meta.value()?.parse()?),
                "max" => opts.max = Some(meta.value()?.parse()?),
                "header" => opts.header = Some(string_value(&meta, "header = \"Region\"")?),
                "complete" => opts.complete = Some((meta.path.span(), meta.value()?.parse()?)),
                _ => {
                    return Err(meta.error(
                        "unknown #[arg] option; expected default, min, max, header or complete",
                    ));
                }
            }
            Ok(())
        });
        if let Err(e) = res {
            err = Some(e);
        }
        false
    });
    match err {
        Some(e) => Err(e),
        None => Ok(opts),
    }
}

/// Classify the parameters of a tool function, stripping `#[arg]` attributes from `sig`: the
/// receiver (for a service method) and each typed parameter in order.
pub(crate) fn params(
    sig: &mut Signature,
    service: Option<&Type>,
) -> syn::Result<(Option<TokenStream>, Vec<Param>)> {
    let mut receiver = None;
    let mut out = Vec::new();
    for input in sig.inputs.iter_mut() {
        match input {
            FnArg::Receiver(r) => receiver = Some(receiver_param(r, service)?),
            FnArg::Typed(pt) => out.push(typed_param(pt, service)?),
        }
    }
    Ok((receiver, out))
}

/// `&self` of a service method (the service is shared across concurrent calls).
fn receiver_param(r: &syn::Receiver, service: Option<&Type>) -> syn::Result<TokenStream> {
    if service.is_none() {
        return Err(syn::Error::new(
            r.span(),
            "#[tool] on a method needs #[service] on its impl block: a service's \
             `pub fn` methods are its tools",
        ));
    }
    if r.mutability.is_some() || r.reference.is_none() {
        return Err(syn::Error::new(
            r.span(),
            format!(
                "a service tool takes `&self`: calls run concurrently, so the service \
                 is shared; use interior mutability (a Mutex or a connection pool) for \
                 state{}",
                helper_hint(service)
            ),
        ));
    }
    Ok(quote!(service))
}

/// One typed parameter: `#[args]` (the whole argument struct), an injected one (`&CallContext`,
/// `&HostApi`, `UserInfo`, `Option<UserInfo>`), or a plain argument named by its pattern.
fn typed_param(pt: &mut syn::PatType, service: Option<&Type>) -> syn::Result<Param> {
    let whole = take_args_marker(&mut pt.attrs)?;
    let opts = take_arg_options(&mut pt.attrs)?;
    let ty = (*pt.ty).clone();
    if let Some(span) = whole {
        return whole_param(span, &opts, ty);
    }
    if let Some(injected) = injected_param(&ty, service)? {
        return Ok(injected);
    }
    Ok(Param::Arg {
        ident: arg_name(&pt.pat, service)?,
        ty: Box::new(ty),
        opts: Box::new(opts),
    })
}

/// `#[args] x: T`: an owned struct, with no `#[arg(...)]` options of its own.
fn whole_param(span: Span, opts: &ArgOptions, ty: Type) -> syn::Result<Param> {
    if opts.default.is_some()
        || opts.min.is_some()
        || opts.max.is_some()
        || opts.header.is_some()
        || opts.complete.is_some()
    {
        return Err(syn::Error::new(
            span,
            "#[args] and #[arg(...)] do not mix: the struct's fields are the \
             arguments, so put bounds and defaults on them \
             (#[schemars(range(min = 1, max = 10))], #[serde(default)])",
        ));
    }
    if matches!(ty, Type::Reference(_)) || is_named(&ty, "UserInfo") || is_named(&ty, "Option") {
        return Err(syn::Error::new(
            ty.span(),
            "#[args] takes an owned struct that derives `Deserialize` and \
             `JsonSchema` (its fields are the arguments), not a reference, an \
             `Option` or an injected parameter",
        ));
    }
    Ok(Param::Whole {
        ty: Box::new(ty),
        span,
    })
}

/// The parameter the host injects for `ty`, if any; any other reference is refused.
fn injected_param(ty: &Type, service: Option<&Type>) -> syn::Result<Option<Param>> {
    if let Type::Reference(r) = ty {
        if is_named(&r.elem, "CallContext") {
            return Ok(Some(Param::Context));
        }
        if is_named(&r.elem, "HostApi") {
            return Ok(Some(Param::Host));
        }
        return Err(syn::Error::new(
            ty.span(),
            format!(
                "tool parameters are owned values deserialized from JSON (use `String` \
                 rather than `&str`); only `&CallContext` and `&HostApi` may be \
                 references{}",
                helper_hint(service)
            ),
        ));
    }
    if is_named(ty, "UserInfo") {
        return Ok(Some(Param::Caller { optional: false }));
    }
    if let Some(seg) = last_segment(ty)
        && seg.ident == "Option"
        && generic_arg(seg, 0).is_some_and(|t| is_named(t, "UserInfo"))
    {
        return Ok(Some(Param::Caller { optional: true }));
    }
    Ok(None)
}

/// A plain argument's name (its JSON name; a raw identifier loses its `r#`).
fn arg_name(pat: &Pat, service: Option<&Type>) -> syn::Result<Ident> {
    match pat {
        Pat::Ident(pi) => {
            let name = pi.ident.to_string();
            Ok(Ident::new(name.trim_start_matches("r#"), pi.ident.span()))
        }
        other => Err(syn::Error::new(
            other.span(),
            format!(
                "tool parameters must be plain names: the name is the JSON argument \
                 name{}",
                helper_hint(service)
            ),
        )),
    }
}

/// `Result<T, E>` -> (true, T); `T` -> (false, T).
pub(crate) fn output_type(sig: &Signature) -> (bool, Type) {
    match &sig.output {
        ReturnType::Default => (false, syn::parse_quote!(())),
        ReturnType::Type(_, ty) => {
            if let Some(seg) = last_segment(ty)
                && seg.ident == "Result"
                && let Some(ok) = generic_arg(seg, 0)
            {
                return (true, ok.clone());
            }
            (false, (**ty).clone())
        }
    }
}

pub(crate) fn opt_str(s: &Option<LitStr>) -> TokenStream {
    match s {
        Some(s) => quote!(::core::option::Option::Some(::std::string::String::from(#s))),
        None => quote!(::core::option::Option::None),
    }
}

pub(crate) fn opt_bool(b: bool) -> TokenStream {
    if b {
        quote!(::core::option::Option::Some(true))
    } else {
        quote!(::core::option::Option::None)
    }
}

/// What every exported function needs: a doc comment (its description, `purpose`) and no generic
/// parameters. `what` names it in the message (``tool `x` ``); `hint` is appended.
pub(crate) fn check_item(
    sig: &Signature,
    parsed: &docs::Docs,
    what: &str,
    purpose: &str,
    hint: &str,
) -> syn::Result<()> {
    if parsed.description.is_empty() {
        return Err(syn::Error::new(
            sig.ident.span(),
            format!(
                "{what} has no doc comment: its description is {purpose}, so write one \
                 (`/// ...`){hint}"
            ),
        ));
    }
    if !sig.generics.params.is_empty() {
        let kind = what.split(' ').next().unwrap_or(what);
        return Err(syn::Error::new(
            sig.generics.span(),
            format!("{kind} functions cannot be generic"),
        ));
    }
    Ok(())
}

/// The call of the user's function: `<Service>::f(service, args...)` or `f(args...)`, driven to
/// completion on the plugin's runtime when it is `async`.
pub(crate) fn call_expr(
    service: Option<&Type>,
    fn_name: &Ident,
    receiver: Option<&TokenStream>,
    call_args: &[TokenStream],
    is_async: bool,
) -> TokenStream {
    let callee = match service {
        Some(svc) => quote!(<#svc>::#fn_name),
        None => quote!(#fn_name),
    };
    let receiver_arg = receiver.map(|r| quote!(#r,));
    let call = quote!(#callee(#receiver_arg #(#call_args),*));
    if is_async {
        quote!(::mcp_plugin_sdk::__private::block_on(#call))
    } else {
        call
    }
}

/// Whether every major client accepts `name` as a tool name: the SDK's `is_valid_tool_name`
/// (`^[a-zA-Z0-9_-]{1,64}$`), which the host applies to every tool it loads.
fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A compile error for a tool name the host would refuse at load: `literal` when the author wrote
/// it (`name = "..."`), else it is the function's name.
fn check_tool_name(name: &LitStr, literal: bool) -> syn::Result<()> {
    let value = name.value();
    if is_valid_tool_name(&value) {
        return Ok(());
    }
    let mut fixed: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if fixed.is_empty() {
        fixed.push_str("my_tool");
    }
    let rule = "a tool name is 1 to 64 ASCII letters, digits, `_` or `-` \
                (^[a-zA-Z0-9_-]{1,64}$, the names every major client accepts), and the host \
                serves no tool whose name breaks the rule";
    let message = if literal {
        format!("invalid tool name {value:?}: {rule}; e.g. name = {fixed:?}")
    } else {
        format!(
            "the function's name `{value}` is not a valid tool name: {rule}; name the tool with \
             #[tool(name = {fixed:?})]"
        )
    };
    Err(syn::Error::new(name.span(), message))
}

/// A symbol named after the tool: two tools of one crate with one name define it twice, which
/// rustc refuses when it builds the crate ("symbol `...` is already defined", at the second
/// name). The host would serve only the first of them. Names keep to `[A-Za-z0-9_]` so every
/// linker takes them (`-` is spelled `_hyphen_`).
fn unique_name_symbol(name: &LitStr) -> TokenStream {
    let symbol = format!(
        "mcp_plugin_sdk__two_tools_of_a_plugin_cannot_share_the_name__{}",
        name.value().replace('-', "_hyphen_")
    );
    quote_spanned! {name.span()=>
        #[used]
        #[allow(unsafe_code, non_upper_case_globals)]
        #[unsafe(export_name = #symbol)]
        static __MCP_TOOL_NAME: u8 = 0;
    }
}

/// A tool's name and doc comment, checked.
struct ToolHeader {
    fn_name: Ident,
    /// `name = ...`, or the function's name (without `r#`).
    name: LitStr,
    docs: docs::Docs,
}

impl ToolHeader {
    /// Step 1: name the tool (a name the host serves) and require its doc comment.
    fn read(
        attrs: &[Attribute],
        sig: &Signature,
        opts: &ToolOptions,
        service: Option<&Type>,
    ) -> syn::Result<Self> {
        let fn_name = sig.ident.clone();
        let name = match &opts.name {
            Some(name) => name.clone(),
            None => LitStr::new(fn_name.to_string().trim_start_matches("r#"), fn_name.span()),
        };
        check_tool_name(&name, opts.name.is_some())?;
        let docs = docs::parse(&docs::doc_lines(attrs));
        check_item(
            sig,
            &docs,
            &format!("tool `{}`", name.value()),
            "what the model reads to decide when to call it",
            helper_hint(service),
        )?;
        Ok(ToolHeader {
            fn_name,
            name,
            docs,
        })
    }
}

/// What a tool's parameters become: the argument struct and the user function's arguments.
struct ToolInputs {
    /// Fields of the generated `Args` struct, with their schema and serde attributes.
    fields: Vec<TokenStream>,
    /// `(name, default value)` pairs the input schema states.
    defaults: Vec<TokenStream>,
    /// `(name, header)` pairs: arguments an HTTP header may fill.
    headers: Vec<TokenStream>,
    /// The user function's arguments, in order.
    call_args: Vec<TokenStream>,
    /// Items before the descriptor: the default functions serde calls.
    prelude: Vec<TokenStream>,
    /// Whether the tool takes the caller (`UserInfo`).
    caller_need: TokenStream,
    /// `#[args] x: T`: `T` is the argument struct, alone among the JSON parameters.
    whole: Option<Type>,
}

impl ToolInputs {
    /// Step 2: classify every parameter of tool `header`.
    fn collect(
        header: &ToolHeader,
        params: &[Param],
        opts: &ToolOptions,
        service: Option<&Type>,
    ) -> syn::Result<Self> {
        let sdk = quote!(::mcp_plugin_sdk);
        let mut inputs = ToolInputs {
            fields: Vec::new(),
            defaults: Vec::new(),
            headers: Vec::new(),
            call_args: Vec::new(),
            prelude: Vec::new(),
            caller_need: quote!(#sdk::__private::CallerNeed::None),
            whole: None,
        };
        let has_plain_args = params.iter().any(|p| matches!(p, Param::Arg { .. }));
        for param in params {
            match param {
                Param::Whole { ty, span } => {
                    if inputs.whole.is_some() || has_plain_args {
                        return Err(whole_args_alone(header, *span));
                    }
                    inputs.whole = Some((**ty).clone());
                    inputs.call_args.push(quote!(args));
                }
                Param::Arg { ident, ty, opts: a } => {
                    let doc = argument_doc(header, ident, a, opts, service)?;
                    inputs.argument(ident, ty, a, &doc);
                }
                Param::Caller { optional } => inputs.caller(*optional),
                Param::Context => inputs.call_args.push(quote!(inv.ctx())),
                Param::Host => inputs.call_args.push(quote!(inv.host())),
            }
        }
        Ok(inputs)
    }

    /// A plain argument: a field of `Args` with its description, default, range and header.
    fn argument(&mut self, ident: &Ident, ty: &Type, a: &ArgOptions, doc: &str) {
        let name = ident.to_string();
        let mut field_attrs = Vec::new();
        if !doc.is_empty() {
            field_attrs.push(quote!(#[schemars(description = #doc)]));
        }
        if let Some(default) = &a.default {
            field_attrs.push(self.default_value(ident, ty, default));
        }
        match (&a.min, &a.max) {
            (Some(min), Some(max)) => {
                field_attrs.push(quote!(#[schemars(range(min = #min, max = #max))]))
            }
            (Some(min), None) => field_attrs.push(quote!(#[schemars(range(min = #min))])),
            (None, Some(max)) => field_attrs.push(quote!(#[schemars(range(max = #max))])),
            (None, None) => {}
        }
        if let Some(h) = &a.header {
            self.headers.push(quote!((#name, #h)));
        }
        if is_named(ty, "Value") {
            field_attrs.push(
                quote!(#[schemars(schema_with = "::mcp_plugin_sdk::__private::object_schema")]),
            );
        }
        self.fields.push(quote!(#(#field_attrs)* #ident: #ty));
        self.call_args.push(quote!(args.#ident));
    }

    /// `#[arg(default = ...)]`: a function serde calls for a missing argument (a string literal
    /// converts into the type), listed among the schema's defaults; returns the field attribute.
    fn default_value(&mut self, ident: &Ident, ty: &Type, default: &Expr) -> TokenStream {
        let sdk = quote!(::mcp_plugin_sdk);
        let name = ident.to_string();
        let default_fn = format_ident!("__mcp_default_{}", ident);
        let default_fn_str = default_fn.to_string();
        let value = match default {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(_),
                ..
            }) => quote!(::core::convert::Into::into(#default)),
            other => quote!(#other),
        };
        self.prelude.push(quote!(
            #[allow(clippy::unnecessary_fallible_conversions)]
            fn #default_fn() -> #ty { #value }
        ));
        self.defaults
            .push(quote!((#name, #sdk::__private::serde_json::to_value(#default_fn()).ok())));
        quote!(#[serde(default = #default_fn_str)])
    }

    /// `UserInfo` or `Option<UserInfo>`: the caller, or the error result when it is missing.
    fn caller(&mut self, optional: bool) {
        let sdk = quote!(::mcp_plugin_sdk);
        let (need, get) = if optional {
            (quote!(Optional), quote!(inv.optional_caller()))
        } else {
            (quote!(Required), quote!(inv.caller()))
        };
        self.caller_need = quote!(#sdk::__private::CallerNeed::#need);
        self.call_args.push(quote!(match #get {
            ::core::result::Result::Ok(c) => c,
            ::core::result::Result::Err(r) => return r,
        }));
    }
}

/// The error for `#[args]` beside other JSON parameters (or a second `#[args]`).
fn whole_args_alone(header: &ToolHeader, span: Span) -> syn::Error {
    syn::Error::new(
        span,
        format!(
            "with #[args], the struct's fields are all of tool `{}`'s arguments: \
             move the other parameters into it (only `UserInfo`, `&CallContext` \
             and `&HostApi` may sit next to it)",
            header.name.value()
        ),
    )
}

/// A tool argument's description from the doc comment (required unless the tool states its own
/// `input_schema`); `complete = ...` is refused, a tool's arguments have schemas.
fn argument_doc(
    header: &ToolHeader,
    ident: &Ident,
    a: &ArgOptions,
    opts: &ToolOptions,
    service: Option<&Type>,
) -> syn::Result<String> {
    let name = ident.to_string();
    if let Some((span, _)) = &a.complete {
        return Err(syn::Error::new(
            *span,
            "#[arg(complete = ...)] completes a prompt argument or a resource template \
             variable; a tool's arguments have JSON Schemas instead",
        ));
    }
    match header.docs.args.get(&name) {
        Some(d) => Ok(d.clone()),
        None if opts.input_schema.is_some() => Ok(String::new()),
        None => Err(syn::Error::new(
            ident.span(),
            format!(
                "parameter `{name}` of tool `{}` is not documented: add \
                 `/// * `{name}` - what it is` under a `/// # Arguments` heading{}",
                header.name.value(),
                helper_hint(service)
            ),
        )),
    }
}

/// `Some(Value::from(expr))` for an optional JSON option, else `None`.
fn opt_json(expr: &Option<Expr>) -> TokenStream {
    match expr {
        Some(expr) => quote!(::core::option::Option::Some(
            ::mcp_plugin_sdk::__private::serde_json::Value::from(#expr)
        )),
        None => quote!(::core::option::Option::None),
    }
}

/// Step 3: the body of `descriptor()` building the `ToolDescriptor`, from the options, the docs and the inputs.
fn tool_descriptor(
    header: &ToolHeader,
    opts: &ToolOptions,
    inputs: &ToolInputs,
    ok_ty: &Type,
) -> TokenStream {
    let sdk = quote!(::mcp_plugin_sdk);
    let ToolInputs {
        defaults,
        headers,
        caller_need,
        ..
    } = inputs;
    let input_schema = match &opts.input_schema {
        Some(expr) => quote!(#sdk::__private::serde_json::Value::from(#expr)),
        None => {
            quote!(#sdk::__private::input_schema_with_headers::<Args>(&[#(#defaults),*], &[#(#headers),*]))
        }
    };
    let (name, description) = (&header.name, &header.docs.description);
    let (meta, client_caps) = (opt_json(&opts.meta), opt_json(&opts.client_capabilities));
    let title = opt_str(&opts.title);
    let read_only = opt_bool(opts.read_only);
    let destructive = opt_bool(opts.destructive);
    let idempotent = opt_bool(opts.idempotent);
    let open_world = opt_bool(opts.open_world);
    let inline = opts.inline;
    let task_support = opts
        .task
        .clone()
        .unwrap_or_else(|| Ident::new("Forbidden", Span::call_site()));
    let ask_first = opts.ask_first.is_some();
    let filter = opts.filter;
    let span = header.fn_name.span();
    quote_spanned!(span=>
        let title: ::core::option::Option<::std::string::String> = #title;
        #sdk::__private::ToolDescriptor {
            name: ::std::string::String::from(#name),
            service: ::core::option::Option::None,
            title: title.clone(),
            description: ::std::string::String::from(#description),
            input_schema: #input_schema,
            output_schema: (&&#sdk::__private::OutputOf::<#ok_ty>::NEW).output_schema(),
            annotations: #sdk::__private::Annotations {
                title,
                read_only_hint: #read_only,
                destructive_hint: #destructive,
                idempotent_hint: #idempotent,
                open_world_hint: #open_world,
            },
            meta: #meta,
            caller: #caller_need,
            inline: #inline,
            required_client_capabilities: #client_caps,
            task_support: #sdk::__private::TaskSupport::#task_support,
            ask_first: #ask_first,
            filter: #filter,
        }
    )
}

/// Step 4: the handler's body: parse the arguments, call the user's function, and turn its
/// output (or its error) into the tool result.
fn tool_handler_body(
    sig: &Signature,
    inputs: &ToolInputs,
    receiver: Option<&TokenStream>,
    service: Option<&Type>,
) -> TokenStream {
    let sdk = quote!(::mcp_plugin_sdk);
    let (is_result, _) = output_type(sig);
    let is_async = sig.asyncness.is_some();
    let call = call_expr(service, &sig.ident, receiver, &inputs.call_args, is_async);
    let convert_ok = quote!({
        #[allow(unused_imports)]
        use #sdk::__private::{ViaContent as _, ViaJson as _, ViaNeither as _};
        let returned = #sdk::__private::Returned::new(value);
        (&&&returned).into_result()
    });
    let convert = if is_result {
        quote!(match out {
            ::core::result::Result::Ok(value) => #convert_ok,
            ::core::result::Result::Err(e) => #sdk::__private::error_result(e),
        })
    } else {
        quote!({ let value = out; #convert_ok })
    };
    let parse_args = if inputs.fields.is_empty() && inputs.whole.is_none() {
        quote!(let _args: Args = match inv.parse_args() { ::core::result::Result::Ok(a) => a, ::core::result::Result::Err(r) => return r };)
    } else {
        quote!(let args: Args = match inv.parse_args() { ::core::result::Result::Ok(a) => a, ::core::result::Result::Err(r) => return r };)
    };
    let span = sig.ident.span();
    quote_spanned! {span=>
        #parse_args
        let out = #call;
        #convert
    }
}

/// The `Args` type: the `#[args]` struct, or one generated from the plain arguments.
fn args_type(inputs: &ToolInputs) -> TokenStream {
    let sdk = quote!(::mcp_plugin_sdk);
    let fields = &inputs.fields;
    match &inputs.whole {
        Some(ty) => quote_spanned! {ty.span()=>
            type Args = #ty;
        },
        None => quote! {
            #[derive(#sdk::__private::serde::Deserialize, #sdk::__private::schemars::JsonSchema)]
            #[serde(crate = "::mcp_plugin_sdk::__private::serde", deny_unknown_fields)]
            #[schemars(crate = "::mcp_plugin_sdk::__private::schemars")]
            #[allow(non_camel_case_types, dead_code)]
            struct Args { #(#fields),* }
        },
    }
}

/// Build the `ToolSpec` expression for one tool. `service` is the service type for methods: read
/// the header, classify the parameters, then build the descriptor and the handler in one block.
fn tool_spec(
    attrs: &[Attribute],
    sig: &mut Signature,
    opts: &ToolOptions,
    service: Option<&Type>,
) -> syn::Result<TokenStream> {
    let sdk = quote!(::mcp_plugin_sdk);
    let header = ToolHeader::read(attrs, sig, opts, service)?;
    let (receiver, params) = params(sig, service)?;
    let inputs = ToolInputs::collect(&header, &params, opts, service)?;
    let (_, ok_ty) = output_type(sig);
    let descriptor = tool_descriptor(&header, opts, &inputs, &ok_ty);
    let body = tool_handler_body(sig, &inputs, receiver.as_ref(), service);
    let args_type = args_type(&inputs);
    let unique_name = unique_name_symbol(&header.name);
    let prelude = &inputs.prelude;
    let svc_ty = match service {
        Some(svc) => quote!(#svc),
        None => quote!(()),
    };
    let service_param = match receiver {
        Some(_) => quote!(service),
        None => quote!(_service),
    };
    // What a tool may return, checked first: its message says to derive `JsonSchema` (or
    // `Serialize`) rather than naming the probes below.
    let output_check = quote_spanned! {ok_ty.span()=>
        #sdk::__private::tool_output::<#ok_ty>();
    };
    let span = header.fn_name.span();
    Ok(quote_spanned! {span=> {
        #args_type

        #unique_name

        #(#prelude)*

        fn descriptor() -> #sdk::__private::ToolDescriptor {
            #output_check
            #[allow(unused_imports)]
            use #sdk::__private::{SchemaViaContent as _, SchemaViaJson as _, SchemaViaNothing as _};
            #descriptor
        }

        #[allow(clippy::unit_arg, clippy::let_unit_value)]
        fn handler(#service_param: &#svc_ty, inv: &#sdk::__private::Invocation<'_>) -> #sdk::ToolResult {
            #body
        }

        #sdk::__private::ToolSpec::<#svc_ty> { descriptor, handler }
    }})
}

/// `#[tool]` on a free function.
pub fn expand_free(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let opts = ToolOptions::parse(attr)?;
    let mut func: ItemFn = match syn::parse2(item.clone()) {
        Ok(Item::Fn(func)) => func,
        Ok(Item::Impl(block)) => {
            return Err(syn::Error::new(
                block.impl_token.span,
                "#[tool] goes on a function; to make an impl block's `pub fn` methods tools, \
                 put #[service] on the impl block",
            ));
        }
        _ => {
            return Err(syn::Error::new(
                item_keyword_span(&item),
                "#[tool] goes on a function (or, inside a #[service] impl block, on a method)",
            ));
        }
    };
    if let Some(span) = opts.skip {
        return Err(syn::Error::new(
            span,
            "#[tool(skip)] marks a helper `pub fn` inside a #[service] impl block; a free function \
             without #[tool] is already not a tool, so drop the attribute",
        ));
    }
    let mut sig = func.sig.clone();
    let spec = tool_spec(&func.attrs, &mut sig, &opts, None)?;
    // The function keeps its signature minus the `#[arg]` attributes.
    func.sig = sig;
    let name = &func.sig.ident;
    let vis = &func.vis;
    Ok(quote! {
        #func

        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #vis struct #name {}

        impl ::mcp_plugin_sdk::__private::ToolFactory for #name {
            fn spec() -> ::mcp_plugin_sdk::__private::ToolSpec<()> #spec
        }

        // Found by `export_plugin!` without a list (registered when the library is loaded).
        ::mcp_plugin_sdk::__private::inventory::submit! {
            ::mcp_plugin_sdk::__private::AutoExport::tool::<#name>(
                ::core::module_path!(),
                ::core::stringify!(#name),
            )
        }
    })
}

/// Take the `#[tool(...)]` attribute off a service method: its span and options (at most one).
fn take_tool_attr(attrs: &mut Vec<Attribute>) -> syn::Result<Option<(Span, ToolOptions)>> {
    let mut found: Option<(Span, ToolOptions)> = None;
    let mut err = None;
    attrs.retain(|a| {
        if !a.path().is_ident("tool") {
            return true;
        }
        let span = a.path().span();
        if found.is_some() {
            err.get_or_insert_with(|| {
                syn::Error::new(span, "duplicate #[tool] attribute: put every option in one")
            });
            return false;
        }
        let tokens = match &a.meta {
            syn::Meta::List(l) => l.tokens.clone(),
            _ => TokenStream::new(),
        };
        match ToolOptions::parse(tokens) {
            Ok(opts) => found = Some((span, opts)),
            Err(e) => {
                err.get_or_insert(e);
            }
        }
        false
    });
    match err {
        Some(e) => Err(e),
        None => Ok(found),
    }
}

/// The impl block under `#[service]`: a plain inherent impl of a named, non-generic type.
fn service_block(attr: TokenStream, item: TokenStream) -> syn::Result<ItemImpl> {
    if let Some(first) = attr.into_iter().next() {
        return Err(syn::Error::new(
            first.span(),
            "#[service] takes no options: the service name is the type's name",
        ));
    }
    let block: ItemImpl = match syn::parse2(item.clone()) {
        Ok(Item::Impl(block)) => block,
        Ok(Item::Fn(func)) => {
            return Err(syn::Error::new(
                func.sig.fn_token.span,
                "#[service] goes on an impl block; a free function becomes a tool with #[tool]",
            ));
        }
        _ => {
            return Err(syn::Error::new(
                item_keyword_span(&item),
                "#[service] goes on an impl block (`#[service] impl MyService { ... }`)",
            ));
        }
    };
    if block.trait_.is_some() || !block.generics.params.is_empty() {
        return Err(syn::Error::new(
            block.self_ty.span(),
            "#[service] goes on a plain inherent impl block of a non-generic type",
        ));
    }
    Ok(block)
}

/// What the methods of a service contribute to its `Service` impl.
struct ServiceParts {
    self_ty: Type,
    tools: Vec<TokenStream>,
    resources: Vec<TokenStream>,
    prompts: Vec<TokenStream>,
    /// The `enabled` gate's call (`true` without one).
    enabled: TokenStream,
    /// The `shutdown` hook's method, if any.
    shutdown: TokenStream,
    /// The constructor's call (`Default` without `new`).
    construct: TokenStream,
}

/// A service's lifecycle hooks: methods with these names are never tools.
const HOOKS: [(&str, &str); 3] = [
    ("enabled", "gate"),
    ("new", "constructor"),
    ("shutdown", "shutdown hook"),
];

impl ServiceParts {
    fn new(self_ty: Type) -> Self {
        let construct =
            quote!(::core::result::Result::Ok(<#self_ty as ::core::default::Default>::default()));
        ServiceParts {
            self_ty,
            tools: Vec::new(),
            resources: Vec::new(),
            prompts: Vec::new(),
            enabled: quote!(true),
            shutdown: quote!(),
            construct,
        }
    }

    /// Sorts one method: a resource or prompt, a hook, a tool, or a helper left alone.
    fn method(&mut self, method: &mut syn::ImplItemFn) -> syn::Result<()> {
        let surface_attr = crate::surface::take_attr(&mut method.attrs)?;
        let tool_attr = take_tool_attr(&mut method.attrs)?;
        if let Some((kind, span, opts)) = surface_attr {
            return self.surface(method, kind, span, &opts, tool_attr.map(|(s, _)| s));
        }
        let name = method.sig.ident.to_string();
        let role = HOOKS
            .iter()
            .find(|(hook, _)| *hook == name)
            .map(|(_, r)| *r);
        match (role, &tool_attr) {
            (Some(role), Some((span, _))) => Err(syn::Error::new(
                *span,
                format!("`{name}` is the service's {role}, never a tool: drop #[tool]"),
            )),
            (Some(_), None) => {
                self.hook(method);
                Ok(())
            }
            (None, _) => self.tool(method, tool_attr),
        }
    }

    /// `#[resource]` / `#[prompt]` on a method (never also a tool, never a hook).
    fn surface(
        &mut self,
        method: &mut syn::ImplItemFn,
        kind: crate::surface::Kind,
        span: Span,
        opts: &crate::surface::Options,
        tool_span: Option<Span>,
    ) -> syn::Result<()> {
        if let Some(tool_span) = tool_span {
            return Err(syn::Error::new(
                tool_span,
                "a method is a tool, a resource or a prompt, not two: drop #[tool]",
            ));
        }
        let name = method.sig.ident.to_string();
        if HOOKS.iter().any(|(hook, _)| *hook == name) {
            return Err(syn::Error::new(
                span,
                "`enabled`, `new` and `shutdown` are the service's hooks, never a resource or a prompt",
            ));
        }
        let mut sig = method.sig.clone();
        let spec = crate::surface::spec(kind, &method.attrs, &mut sig, opts, Some(&self.self_ty))?;
        method.sig = sig;
        match kind {
            crate::surface::Kind::Resource => self.resources.push(spec),
            crate::surface::Kind::Prompt => self.prompts.push(spec),
        }
        Ok(())
    }

    /// `enabled`, `new` or `shutdown`: `enabled` and `new` may take the `&HostApi`; `new` may
    /// return a `Result`.
    fn hook(&mut self, method: &syn::ImplItemFn) {
        let self_ty = &self.self_ty;
        let ident = &method.sig.ident;
        let takes_host = method
            .sig
            .inputs
            .iter()
            .any(|i| matches!(i, FnArg::Typed(_)));
        let call = if takes_host {
            quote!(<#self_ty>::#ident(host))
        } else {
            quote!(<#self_ty>::#ident())
        };
        match ident.to_string().as_str() {
            "enabled" => self.enabled = call,
            "shutdown" => {
                self.shutdown = quote!(
                    fn shutdown(&self) {
                        <#self_ty>::#ident(self)
                    }
                )
            }
            _ => {
                let fallible =
                    matches!(&method.sig.output, ReturnType::Type(_, ty) if is_named(ty, "Result"));
                self.construct = if fallible {
                    quote!(#call.map_err(|e| ::std::format!("{e:#}")))
                } else {
                    quote!(::core::result::Result::Ok(#call))
                };
            }
        }
    }

    /// Any other method: a `pub fn` is a tool unless `#[tool(skip)]`; `#[tool]` needs `pub`.
    fn tool(
        &mut self,
        method: &mut syn::ImplItemFn,
        tool_attr: Option<(Span, ToolOptions)>,
    ) -> syn::Result<()> {
        let is_pub = matches!(method.vis, Visibility::Public(_));
        let opts = match tool_attr {
            Some((_, opts)) => {
                if let Some(span) = opts.skip {
                    if !is_pub {
                        return Err(syn::Error::new(
                            span,
                            "a method that is not `pub` is never a tool: drop #[tool(skip)]",
                        ));
                    }
                    return Ok(());
                }
                if !is_pub {
                    return Err(syn::Error::new(
                        method.sig.ident.span(),
                        "only `pub fn` methods of a service are tools: make it `pub` or drop #[tool]",
                    ));
                }
                opts
            }
            None if !is_pub => return Ok(()),
            None => ToolOptions::default(),
        };
        let mut sig = method.sig.clone();
        self.tools.push(tool_spec(
            &method.attrs,
            &mut sig,
            &opts,
            Some(&self.self_ty),
        )?);
        method.sig = sig;
        Ok(())
    }
}

/// `#[service]` on an impl block: check the block, sort its methods into tools, resources,
/// prompts and hooks, then implement `Service` for the type and register it for export.
pub fn expand_service(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let mut block = service_block(attr, item)?;
    let self_ty = (*block.self_ty).clone();
    let Some(type_name) = last_segment(&self_ty).map(|s| s.ident.to_string()) else {
        return Err(syn::Error::new(
            self_ty.span(),
            "#[service] needs a named type",
        ));
    };
    let service_docs = docs::parse(&docs::doc_lines(&block.attrs)).description;
    let description = if service_docs.is_empty() {
        quote!(::core::option::Option::None)
    } else {
        quote!(::core::option::Option::Some(#service_docs))
    };
    let mut parts = ServiceParts::new(self_ty.clone());
    for item in block.items.iter_mut() {
        if let ImplItem::Fn(method) = item {
            parts.method(method)?;
        }
    }
    let ServiceParts {
        tools,
        resources,
        prompts,
        enabled,
        shutdown,
        construct,
        ..
    } = parts;
    Ok(quote! {
        #block

        impl ::mcp_plugin_sdk::__private::Service for #self_ty {
            const NAME: &'static str = #type_name;
            const DESCRIPTION: ::core::option::Option<&'static str> = #description;

            #[allow(unused_variables)]
            fn enabled(host: &::mcp_plugin_sdk::HostApi) -> bool {
                #enabled
            }

            #[allow(unused_variables)]
            fn construct(host: &::mcp_plugin_sdk::HostApi) -> ::core::result::Result<Self, ::std::string::String> {
                #construct
            }

            fn tools() -> ::std::vec::Vec<::mcp_plugin_sdk::__private::ToolSpec<Self>> {
                ::std::vec![#(#tools),*]
            }

            fn resources() -> ::std::vec::Vec<::mcp_plugin_sdk::__private::ResourceSpec<Self>> {
                ::std::vec![#(#resources),*]
            }

            fn prompts() -> ::std::vec::Vec<::mcp_plugin_sdk::__private::PromptSpec<Self>> {
                ::std::vec![#(#prompts),*]
            }

            #shutdown
        }

        // Found by `export_plugin!` without a list (registered when the library is loaded).
        ::mcp_plugin_sdk::__private::inventory::submit! {
            ::mcp_plugin_sdk::__private::AutoExport::service::<#self_ty>(
                ::core::module_path!(),
                #type_name,
            )
        }
    })
}
