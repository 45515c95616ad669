//! Expansion of `#[resource]` and `#[prompt]`, on free functions and on methods of a `#[service]`.
//!
//! Each becomes a `SurfaceSpec`: a descriptor function (URI or name, doc comment -> description,
//! arguments), a handler (JSON arguments -> the user's function -> an MCP result) and the completion
//! functions named by `#[arg(complete = path)]`. Parameters are classified as for tools
//! (`UserInfo`, `&CallContext`, `&HostApi`, plain arguments).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{Attribute, Expr, Item, ItemFn, LitStr, Signature, Type, spanned::Spanned};

use crate::docs;
use crate::tool::{
    ArgOptions, Param, call_expr, check_item, generic_arg, is_named, item_keyword_span,
    last_segment, opt_str, output_type, params, string_value,
};

/// A resource (or resource template) or a prompt.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Resource,
    Prompt,
}

impl Kind {
    fn attr(self) -> &'static str {
        match self {
            Kind::Resource => "resource",
            Kind::Prompt => "prompt",
        }
    }
}

/// Options of `#[resource(...)]` / `#[prompt(...)]`.
#[derive(Default)]
pub(crate) struct Options {
    uri: Option<LitStr>,
    name: Option<LitStr>,
    title: Option<LitStr>,
    mime_type: Option<LitStr>,
    meta: Option<Expr>,
}

impl Options {
    pub(crate) fn parse(kind: Kind, tokens: TokenStream) -> syn::Result<Self> {
        let mut opts = Options::default();
        let expected = match kind {
            Kind::Resource => "uri, name, title, mime_type, meta",
            Kind::Prompt => "name, title, meta",
        };
        let parser = syn::meta::parser(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            match (kind, key.as_str()) {
                (Kind::Resource, "uri") => {
                    opts.uri = Some(string_value(&meta, "uri = \"scheme://path/{var}\"")?)
                }
                (_, "name") => opts.name = Some(string_value(&meta, "name = \"my_name\"")?),
                (_, "title") => opts.title = Some(string_value(&meta, "title = \"My title\"")?),
                (Kind::Resource, "mime_type") => {
                    opts.mime_type = Some(string_value(&meta, "mime_type = \"text/plain\"")?)
                }
                (_, "meta") => opts.meta = Some(meta.value()?.parse()?),
                _ => {
                    return Err(meta.error(format!(
                        "unknown #[{}] option; expected one of: {expected}",
                        kind.attr()
                    )));
                }
            }
            Ok(())
        });
        syn::parse::Parser::parse2(parser, tokens)?;
        Ok(opts)
    }
}

/// The variable names of an RFC 6570 URI template (`{var}`, `{+var}`, `{?a,b}`, `{var*}`, ...).
pub(crate) fn template_variables(template: &str) -> Vec<String> {
    let mut vars = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let expr = &rest[start + 1..start + len];
        let expr = expr.trim_start_matches(['+', '#', '.', '/', ';', '?', '&']);
        for var in expr.split(',') {
            let var = var.trim_end_matches('*');
            let var = var.split(':').next().unwrap_or(var);
            if !var.is_empty() {
                vars.push(var.to_owned());
            }
        }
        rest = &rest[start + len + 1..];
    }
    vars
}

/// `tokens` with every `Self` replaced by `<ty>`.
fn replace_self(tokens: TokenStream, ty: &Type) -> TokenStream {
    use proc_macro2::{Group, TokenTree};
    tokens
        .into_iter()
        .flat_map(|tt| -> Vec<TokenTree> {
            match tt {
                TokenTree::Ident(i) if i == "Self" => quote!(<#ty>).into_iter().collect(),
                TokenTree::Group(g) => {
                    let mut inner = Group::new(g.delimiter(), replace_self(g.stream(), ty));
                    inner.set_span(g.span());
                    vec![TokenTree::Group(inner)]
                }
                other => vec![other],
            }
        })
        .collect()
}

/// Whether `ty` is `Option<String>`.
fn is_optional_string(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|seg| {
        seg.ident == "Option" && generic_arg(seg, 0).is_some_and(|t| is_named(t, "String"))
    })
}

/// What a resource or prompt is called and described as, read from its attributes and doc comment.
struct Header {
    kind: Kind,
    fn_name: syn::Ident,
    /// The name clients see: `name = ...`, or the function's.
    name: LitStr,
    docs: docs::Docs,
    /// A resource's URI (or URI template); `None` for a prompt.
    uri: Option<LitStr>,
    /// The URI template's variables (empty for a fixed URI and for a prompt).
    variables: Vec<String>,
}

impl Header {
    /// Step 1: name the item, check its doc comment, and require a resource's URI.
    fn read(kind: Kind, attrs: &[Attribute], sig: &Signature, opts: &Options) -> syn::Result<Self> {
        let fn_name = sig.ident.clone();
        let name = opts
            .name
            .clone()
            .unwrap_or_else(|| LitStr::new(&fn_name.to_string(), fn_name.span()));
        let docs = docs::parse(&docs::doc_lines(attrs));
        check_item(
            sig,
            &docs,
            &format!("{} `{}`", kind.attr(), name.value()),
            "what clients show",
            "",
        )?;
        let uri = match (kind, &opts.uri) {
            (Kind::Resource, Some(uri)) => Some(uri.clone()),
            (Kind::Resource, None) => {
                return Err(syn::Error::new(
                    fn_name.span(),
                    "#[resource] needs its URI: `#[resource(uri = \"scheme://path\")]`, or a URI \
                     template such as `uri = \"scheme://items/{id}\"` whose variables are parameters",
                ));
            }
            (Kind::Prompt, _) => None,
        };
        let variables = uri
            .as_ref()
            .map(|u| template_variables(&u.value()))
            .unwrap_or_default();
        Ok(Header {
            kind,
            fn_name,
            name,
            docs,
            uri,
            variables,
        })
    }

    /// The URI as written (empty for a prompt).
    fn uri_text(&self) -> String {
        self.uri.as_ref().map(LitStr::value).unwrap_or_default()
    }

    /// Step 3: every template variable of a resource has its parameter.
    fn check_variables_taken(&self, taken: &[String]) -> syn::Result<()> {
        let fn_name = &self.fn_name;
        match self.variables.iter().find(|v| !taken.contains(v)) {
            Some(missing) if self.kind == Kind::Resource => Err(syn::Error::new(
                self.uri.as_ref().map_or(fn_name.span(), LitStr::span),
                format!(
                    "template variable `{missing}` has no parameter: add `{missing}: String` to \
                     `{fn_name}`"
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// What the parameters of a resource or prompt become in the expansion.
struct Inputs {
    /// Fields of the generated `Args` struct (`name: String`).
    fields: Vec<TokenStream>,
    /// The user function's arguments, in order.
    call_args: Vec<TokenStream>,
    /// A prompt's `PromptArgument` descriptors.
    arguments: Vec<TokenStream>,
    /// `(name, completer fn)` pairs and the completer fns themselves.
    completers: Vec<TokenStream>,
    completer_fns: Vec<TokenStream>,
    /// The arguments that have a completer.
    completion_args: Vec<String>,
    /// The plain arguments' names.
    arg_names: Vec<String>,
    /// Whether the item takes the caller (`UserInfo`).
    caller_need: TokenStream,
}

/// The arm that hands an envelope error back from the generated handler.
fn envelope_err() -> TokenStream {
    quote!(::core::result::Result::Err(e) => return ::core::result::Result::Err(e))
}

impl Inputs {
    /// Step 2: classify every parameter, checking it against the kind's rules.
    fn collect(header: &Header, params: &[Param], service: Option<&Type>) -> syn::Result<Self> {
        let sdk = quote!(::mcp_plugin_sdk);
        let mut inputs = Inputs {
            fields: Vec::new(),
            call_args: Vec::new(),
            arguments: Vec::new(),
            completers: Vec::new(),
            completer_fns: Vec::new(),
            completion_args: Vec::new(),
            arg_names: Vec::new(),
            caller_need: quote!(#sdk::__private::CallerNeed::None),
        };
        for param in params {
            match param {
                Param::Whole { span, .. } => return Err(whole_args_refused(header.kind, *span)),
                Param::Arg { ident, ty, opts } => {
                    inputs.argument(header, ident, ty, opts, service)?
                }
                Param::Caller { optional } => inputs.caller(*optional),
                Param::Context => inputs.call_args.push(quote!(inv.ctx())),
                Param::Host => inputs.call_args.push(quote!(inv.host())),
            }
        }
        Ok(inputs)
    }

    /// A plain (string) argument: a field of `Args`, a prompt argument, maybe a completer.
    fn argument(
        &mut self,
        header: &Header,
        ident: &syn::Ident,
        ty: &Type,
        opts: &ArgOptions,
        service: Option<&Type>,
    ) -> syn::Result<()> {
        let optional = check_string_argument(header.kind, ident, ty, opts)?;
        let arg = ident.to_string();
        match header.kind {
            Kind::Resource if !header.variables.contains(&arg) => {
                return Err(syn::Error::new(
                    ident.span(),
                    format!(
                        "parameter `{arg}` is not a variable of the URI template {:?}: a \
                         resource's parameters are its template variables (add `{{{arg}}}` \
                         to the URI, or take `&CallContext`, `&HostApi` or `UserInfo`)",
                        header.uri_text()
                    ),
                ));
            }
            Kind::Resource => {}
            Kind::Prompt => self
                .arguments
                .push(prompt_argument(header, ident, optional)?),
        }
        if let Some((_, path)) = &opts.complete {
            self.completer(ident, path, service);
        }
        self.fields.push(quote!(#ident: #ty));
        self.call_args.push(quote!(args.#ident));
        self.arg_names.push(arg);
        Ok(())
    }

    /// `#[arg(complete = path)]`: a completer fn calling `path` (with the service, for a method).
    fn completer(&mut self, ident: &syn::Ident, path: &Expr, service: Option<&Type>) {
        let sdk = quote!(::mcp_plugin_sdk);
        let f = format_ident!("__mcp_complete_{}", ident);
        let call = match service {
            // The completer is a nested fn item, where `Self` does not exist.
            Some(svc) => {
                let path = replace_self(quote!(#path), svc);
                quote!(#path(service, request))
            }
            None => quote!(#path(request)),
        };
        self.completer_fns.push(quote!(
            #[allow(unused_variables)]
            fn #f(service: &Svc, request: &#sdk::CompletionRequest) -> #sdk::Completion {
                #sdk::__private::completion(#call)
            }
        ));
        let arg = ident.to_string();
        self.completers
            .push(quote!((#arg, #f as fn(&Svc, &#sdk::CompletionRequest) -> #sdk::Completion)));
        self.completion_args.push(arg);
    }

    /// `UserInfo` or `Option<UserInfo>`: the caller from the envelope.
    fn caller(&mut self, optional: bool) {
        let sdk = quote!(::mcp_plugin_sdk);
        let (need, get) = if optional {
            (quote!(Optional), quote!(inv.envelope_optional_caller()))
        } else {
            (quote!(Required), quote!(inv.envelope_caller()))
        };
        self.caller_need = quote!(#sdk::__private::CallerNeed::#need);
        let envelope_err = envelope_err();
        self.call_args
            .push(quote!(match #get { ::core::result::Result::Ok(c) => c, #envelope_err }));
    }
}

/// The error for `#[args]` on a resource or prompt.
fn whole_args_refused(kind: Kind, span: Span) -> syn::Error {
    syn::Error::new(
        span,
        format!(
            "#[args] is for tools; a {} takes its arguments as `String` parameters",
            match kind {
                Kind::Resource => "resource template",
                Kind::Prompt => "prompt",
            }
        ),
    )
}

/// A resource's or prompt's argument is a string with no `#[arg]` option but `complete`; returns
/// whether it is optional (`Option<String>`).
fn check_string_argument(
    kind: Kind,
    ident: &syn::Ident,
    ty: &Type,
    opts: &ArgOptions,
) -> syn::Result<bool> {
    if opts.default.is_some() || opts.min.is_some() || opts.max.is_some() || opts.header.is_some() {
        return Err(syn::Error::new(
            ident.span(),
            format!(
                "#[{}] arguments are strings: of #[arg], only `complete = path` applies",
                kind.attr()
            ),
        ));
    }
    let optional = is_optional_string(ty);
    if !is_named(ty, "String") && !optional {
        return Err(syn::Error::new(
            ty.span(),
            match kind {
                Kind::Resource => "template variables are strings: take `String`",
                Kind::Prompt => {
                    "prompt arguments are strings: take `String` (required) or \
                     `Option<String>` (optional)"
                }
            },
        ));
    }
    Ok(optional)
}

/// A prompt argument's `PromptArgument` descriptor, its description from the doc comment.
fn prompt_argument(
    header: &Header,
    ident: &syn::Ident,
    optional: bool,
) -> syn::Result<TokenStream> {
    let sdk = quote!(::mcp_plugin_sdk);
    let arg = ident.to_string();
    let Some(doc) = header.docs.args.get(&arg) else {
        return Err(syn::Error::new(
            ident.span(),
            format!(
                "argument `{arg}` of prompt `{}` is not documented: add \
                 `/// * `{arg}` - what it is` under a `/// # Arguments` heading",
                header.name.value()
            ),
        ));
    };
    let required = !optional;
    Ok(quote!(#sdk::__private::PromptArgument {
        name: ::std::string::String::from(#arg),
        description: ::core::option::Option::Some(::std::string::String::from(#doc)),
        required: #required,
    }))
}

/// The descriptor's type, the expression building it, and the conversion of the user function's
/// output (`out`) into the MCP result.
struct Descriptor {
    ty: TokenStream,
    build: TokenStream,
    convert: TokenStream,
}

/// Step 4: the descriptor of a resource or a prompt.
fn descriptor(header: &Header, opts: &Options, inputs: &Inputs) -> Descriptor {
    let sdk = quote!(::mcp_plugin_sdk);
    let name = &header.name;
    let title = opt_str(&opts.title);
    let description = &header.docs.description;
    let caller_need = &inputs.caller_need;
    let meta = match &opts.meta {
        Some(expr) => {
            quote!(::core::option::Option::Some(#sdk::__private::serde_json::Value::from(#expr)))
        }
        None => quote!(::core::option::Option::None),
    };
    let completion_names = inputs
        .completion_args
        .iter()
        .map(|a| quote!(::std::string::String::from(#a)));
    match header.kind {
        Kind::Resource => {
            let uri = header.uri_text();
            let template = !header.variables.is_empty();
            let mime = opt_str(&opts.mime_type);
            let mime_ref = match &opts.mime_type {
                Some(m) => quote!(::core::option::Option::Some(#m)),
                None => quote!(::core::option::Option::None),
            };
            Descriptor {
                ty: quote!(#sdk::__private::ResourceDescriptor),
                build: quote!(#sdk::__private::ResourceDescriptor {
                    uri: ::std::string::String::from(#uri),
                    template: #template,
                    name: ::std::string::String::from(#name),
                    title: #title,
                    description: ::core::option::Option::Some(::std::string::String::from(#description)),
                    mime_type: #mime,
                    service: ::core::option::Option::None,
                    caller: #caller_need,
                    meta: #meta,
                    completions: ::std::vec![#(#completion_names),*],
                }),
                convert: quote!({
                    #[allow(unused_imports)]
                    use #sdk::__private::{ViaResource as _, ViaResourceJson as _};
                    let returned = #sdk::__private::Returned::new(out);
                    #sdk::__private::read_result(inv, #mime_ref, (&&returned).into_contents())
                }),
            }
        }
        Kind::Prompt => {
            let arguments = &inputs.arguments;
            Descriptor {
                ty: quote!(#sdk::__private::PromptDescriptor),
                build: quote!(#sdk::__private::PromptDescriptor {
                    name: ::std::string::String::from(#name),
                    title: #title,
                    description: ::std::string::String::from(#description),
                    arguments: ::std::vec![#(#arguments),*],
                    service: ::core::option::Option::None,
                    caller: #caller_need,
                    meta: #meta,
                    completions: ::std::vec![#(#completion_names),*],
                }),
                convert: quote!(#sdk::__private::prompt_result(out)),
            }
        }
    }
}

/// How the generated handler calls the user's function.
struct Call {
    /// The call expression (awaited on the plugin's runtime for an `async fn`).
    expr: TokenStream,
    /// `Result` outputs: unwraps `out`, or hands the error back as invalid params.
    unwrap_result: TokenStream,
    /// Whether the function is a method taking the service.
    takes_service: bool,
}

impl Call {
    fn new(
        sig: &Signature,
        service: Option<&Type>,
        receiver: Option<&TokenStream>,
        call_args: &[TokenStream],
    ) -> Self {
        let sdk = quote!(::mcp_plugin_sdk);
        let is_async = sig.asyncness.is_some();
        let (is_result, _) = output_type(sig);
        let unwrap_result = if is_result {
            quote!(let out = match out {
                ::core::result::Result::Ok(v) => v,
                ::core::result::Result::Err(e) => return ::core::result::Result::Err(#sdk::__private::envelope_invalid(e)),
            };)
        } else {
            quote!()
        };
        Call {
            expr: call_expr(service, &sig.ident, receiver, call_args, is_async),
            unwrap_result,
            takes_service: receiver.is_some(),
        }
    }
}

/// Step 5: the block evaluating to the `SurfaceSpec`: `Args`, completers, descriptor and handler.
fn assemble(
    header: &Header,
    inputs: &Inputs,
    descriptor: &Descriptor,
    call: &Call,
    service: Option<&Type>,
) -> TokenStream {
    let sdk = quote!(::mcp_plugin_sdk);
    let Inputs {
        fields,
        completers,
        completer_fns,
        ..
    } = inputs;
    let Descriptor {
        ty: descriptor_ty,
        build: descriptor,
        convert,
    } = descriptor;
    let Call {
        expr: call,
        unwrap_result,
        takes_service,
    } = call;
    let svc_ty = match service {
        Some(svc) => quote!(#svc),
        None => quote!(()),
    };
    let service_param = if *takes_service {
        quote!(service)
    } else {
        quote!(_service)
    };
    let envelope_err = envelope_err();
    let parse_args = if fields.is_empty() {
        quote!()
    } else {
        quote!(let args: Args = match inv.parse_envelope_args() { ::core::result::Result::Ok(a) => a, #envelope_err };)
    };
    let span = header.fn_name.span();
    quote_spanned! {span=> {
        #[derive(#sdk::__private::serde::Deserialize)]
        #[serde(crate = "::mcp_plugin_sdk::__private::serde")]
        #[allow(non_camel_case_types, non_snake_case, dead_code)]
        struct Args { #(#fields),* }

        #[allow(dead_code)]
        type Svc = #svc_ty;

        #(#completer_fns)*

        fn descriptor() -> #descriptor_ty {
            #descriptor
        }

        #[allow(clippy::unit_arg, clippy::let_unit_value, unused_variables)]
        fn handler(#service_param: &#svc_ty, inv: &#sdk::__private::Invocation<'_>) -> #sdk::__private::EnvelopeResult {
            #parse_args
            let out = #call;
            #unwrap_result
            #convert
        }

        #sdk::__private::SurfaceSpec::<#svc_ty, #descriptor_ty> {
            descriptor,
            handler,
            completers: ::std::vec![#(#completers),*],
        }
    }}
}

/// Build the `SurfaceSpec` expression for one resource or prompt: read its header, classify its
/// parameters, check the URI template is covered, then build the descriptor and the handler.
pub(crate) fn spec(
    kind: Kind,
    attrs: &[Attribute],
    sig: &mut Signature,
    opts: &Options,
    service: Option<&Type>,
) -> syn::Result<TokenStream> {
    let header = Header::read(kind, attrs, sig, opts)?;
    let (receiver, params) = params(sig, service)?;
    let inputs = Inputs::collect(&header, &params, service)?;
    header.check_variables_taken(&inputs.arg_names)?;
    let call = Call::new(sig, service, receiver.as_ref(), &inputs.call_args);
    let descriptor = descriptor(&header, opts, &inputs);
    Ok(assemble(&header, &inputs, &descriptor, &call, service))
}

/// `#[resource]` / `#[prompt]` on a free function.
pub(crate) fn expand_free(
    kind: Kind,
    attr: TokenStream,
    item: TokenStream,
) -> syn::Result<TokenStream> {
    let opts = Options::parse(kind, attr)?;
    let mut func: ItemFn = match syn::parse2(item.clone()) {
        Ok(Item::Fn(func)) => func,
        _ => {
            return Err(syn::Error::new(
                item_keyword_span(&item),
                format!(
                    "#[{}] goes on a function (or, inside a #[service] impl block, on a method)",
                    kind.attr()
                ),
            ));
        }
    };
    let mut sig = func.sig.clone();
    let spec = spec(kind, &func.attrs, &mut sig, &opts, None)?;
    func.sig = sig;
    let name = &func.sig.ident;
    let vis = &func.vis;
    let (factory, spec_ty, ctor) = match kind {
        Kind::Resource => (
            quote!(ResourceFactory),
            quote!(ResourceSpec),
            quote!(resource),
        ),
        Kind::Prompt => (quote!(PromptFactory), quote!(PromptSpec), quote!(prompt)),
    };
    Ok(quote! {
        #func

        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #vis struct #name {}

        impl ::mcp_plugin_sdk::__private::#factory for #name {
            fn spec() -> ::mcp_plugin_sdk::__private::#spec_ty<()> #spec
        }

        // Found by `export_plugin!` without a list (registered when the library is loaded).
        ::mcp_plugin_sdk::__private::inventory::submit! {
            ::mcp_plugin_sdk::__private::AutoExport::#ctor::<#name>(
                ::core::module_path!(),
                ::core::stringify!(#name),
            )
        }
    })
}

/// Take a `#[resource(...)]` or `#[prompt(...)]` attribute off a service method.
pub(crate) fn take_attr(attrs: &mut Vec<Attribute>) -> syn::Result<Option<(Kind, Span, Options)>> {
    let mut found = None;
    let mut err = None;
    attrs.retain(|a| {
        let kind = if a.path().is_ident("resource") {
            Kind::Resource
        } else if a.path().is_ident("prompt") {
            Kind::Prompt
        } else {
            return true;
        };
        let span = a.path().span();
        if found.is_some() {
            err.get_or_insert_with(|| {
                syn::Error::new(
                    span,
                    "a method is one resource or one prompt: drop one attribute",
                )
            });
            return false;
        }
        let tokens = match &a.meta {
            syn::Meta::List(l) => l.tokens.clone(),
            _ => TokenStream::new(),
        };
        match Options::parse(kind, tokens) {
            Ok(opts) => found = Some((kind, span, opts)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_variables_of_every_expression_kind() {
        assert_eq!(template_variables("test://template/{id}/data"), ["id"]);
        assert_eq!(
            template_variables("file:///{+path}{?q,lang}{#frag*}"),
            ["path", "q", "lang", "frag"]
        );
        assert!(template_variables("time://zones").is_empty());
    }
}
