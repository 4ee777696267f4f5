//! Targets without probes: the macros type-check their arguments and
//! compile to nothing.

#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_enabled {
    ($p:ident, $n:ident) => {
        false
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __sdt_emit {
    (($p:ident, $n:ident) $(($arg:expr) $a:ident $t:ident $s:ident)*) => {{
        fn site<$($t: $crate::Argument),*>($(_: $t),*) {}
        site($($arg),*)
    }};
}
