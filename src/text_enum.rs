//! Enums that are stored, typed and shown as text (run states, policies, triggers): one macro
//! gives each its names, its parser and its error, so every one of them reads the same way from
//! a flag and from a database column.

/// A name that is not one of an enum's, e.g. `--overlap sometimes`, or a stored `catch_up` this
/// runner does not know. `Display` is a complete message for a human.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}; use one of: {}", .accepted.join(", "))]
pub struct UnknownName {
    /// What was being named, e.g. `overlap policy`.
    pub what: &'static str,
    /// The text as given.
    pub value: String,
    /// The names there are.
    pub accepted: &'static [&'static str],
}

/// `text_enum!(/// doc  Name { Variant => "text", ... }, "what it is")`: the enum with `ALL`,
/// `NAMES`, `as_str`, `Display`, `Serialize` (as that text), and a `FromStr` that ignores case and
/// surrounding blanks (a flag typed `--catch-up ALL` means `all`) and fails with an
/// [`UnknownName`].
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident {
        $($(#[$variant_meta:meta])* $variant:ident => $text:literal),+ $(,)?
    }, $what:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$variant_meta])* $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The names, in the order of `ALL` (for a flag's shell completion, among others).
            pub const NAMES: &'static [&'static str] = &[$($text),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::text_enum::UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let wanted = s.trim();
                Self::ALL
                    .iter()
                    .copied()
                    .find(|known| known.as_str().eq_ignore_ascii_case(wanted))
                    .ok_or_else(|| $crate::text_enum::UnknownName {
                        what: $what,
                        value: wanted.to_string(),
                        accepted: Self::NAMES,
                    })
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use text_enum;
