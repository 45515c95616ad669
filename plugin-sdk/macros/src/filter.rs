//! `#[filter]`: a result filter is a tool the host never serves. The function's one parameter
//! (the `FilterInput`) becomes the tool's whole arguments (`#[args]`) and the attribute becomes
//! `#[tool(filter)]`, so a filter is described, registered, called, timed out and isolated
//! exactly like a tool.

use proc_macro2::TokenStream;
use quote::quote;
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn};

/// Expand `#[filter]` on `item`.
pub fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !attr.is_empty() {
        return Err(syn::Error::new(attr.span(), "#[filter] takes no options"));
    }
    let mut func: ItemFn = syn::parse2(item)?;
    let span = func.sig.span();
    let mut inputs = func.sig.inputs.iter_mut();
    let (Some(FnArg::Typed(input)), None) = (inputs.next(), inputs.next()) else {
        return Err(syn::Error::new(
            span,
            "a #[filter] is a free function of one parameter: \
             `fn name(input: FilterInput) -> FilterVerdict`",
        ));
    };
    input.attrs.push(syn::parse_quote!(#[args]));
    Ok(quote! {
        #[::mcp_plugin_sdk::tool(filter)]
        #func
    })
}
