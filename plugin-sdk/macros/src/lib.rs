//! Procedural macros of `mcp-plugin-sdk`: `#[tool]` and `#[service]`.
//!
//! Use them through the SDK (`mcp_plugin_sdk::{tool, service}`); the generated code names the SDK as
//! `::mcp_plugin_sdk`. See the SDK's documentation for what each construct becomes.

mod docs;
mod filter;
mod surface;
mod tool;

use proc_macro::TokenStream;

/// Turn a documented free function into an MCP tool (see the SDK docs).
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    tool::expand_free(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Turn an `impl` block into a service: each `pub fn` is a tool, except the `enabled`, `new` and
/// `shutdown` hooks and helpers marked `#[tool(skip)]` (see the SDK docs).
#[proc_macro_attribute]
pub fn service(attr: TokenStream, item: TokenStream) -> TokenStream {
    tool::expand_service(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Turn a documented function into an MCP resource, or a resource template when its URI has
/// `{variables}` (each a `String` parameter): `#[resource(uri = "...", mime_type = "...")]` (see the
/// SDK docs).
#[proc_macro_attribute]
pub fn resource(attr: TokenStream, item: TokenStream) -> TokenStream {
    surface::expand_free(surface::Kind::Resource, attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Turn a documented function into an MCP prompt: its `String` / `Option<String>` parameters are
/// the prompt's arguments (see the SDK docs).
#[proc_macro_attribute]
pub fn prompt(attr: TokenStream, item: TokenStream) -> TokenStream {
    surface::expand_free(surface::Kind::Prompt, attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Turn a documented function `fn name(input: FilterInput) -> FilterVerdict` into a result
/// filter: a detector the host runs over tool results when its guardrails name it (see the SDK
/// docs). It is never served as a tool.
#[proc_macro_attribute]
pub fn filter(attr: TokenStream, item: TokenStream) -> TokenStream {
    filter::expand(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
