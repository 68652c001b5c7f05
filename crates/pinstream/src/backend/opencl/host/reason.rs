//! Why a region uses its strategy, as data: forced by name, `auto`'s rule for the driver (and
//! the strategies it fell back from), or the caller's own memory registered. The `Display`
//! forms are the library's text; a front may phrase the fields its own way.

use super::strategy::AutoRule;
use super::Strategy;
use std::fmt;

/// How a region's strategy was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Chosen {
    /// Asked for by name.
    Forced(Strategy),
    /// `auto`: its rule, and each strategy tried before the one taken, with its failure.
    Auto {
        /// Why `auto` orders the strategies as it does.
        rule: AutoRule,
        /// The strategy taken.
        taken: Strategy,
        /// The strategies tried first and why each failed (`register: ...`); empty where the
        /// first worked.
        fell_back_after: Vec<String>,
    },
    /// Memory the caller owns, registered ([`HostRegion::register`](super::HostRegion::register)).
    Registered,
    /// Mapped memory ([`HostRegion::mapped`](super::HostRegion::mapped)): the strategy follows from the driver's
    /// zero-copy mechanism.
    Mapped(super::ZeroCopy),
}

/// Why a region uses its strategy ([`HostRegion::strategy_reason`](super::HostRegion::strategy_reason)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrategyReason {
    /// How the strategy was chosen.
    pub chosen: Chosen,
    /// Pinned progressively, chunk by chunk, as the stream goes ([`Progressive`](crate::backend::pinning::Progressive)).
    pub progressive: bool,
}

impl StrategyReason {
    /// A reason for a region pinned up front.
    pub fn new(chosen: Chosen) -> Self {
        Self {
            chosen,
            progressive: false,
        }
    }
}

impl fmt::Display for StrategyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.chosen {
            Chosen::Forced(s) => write!(f, "forced: {s} asked for by name")?,
            Chosen::Auto {
                rule,
                fell_back_after,
                ..
            } if fell_back_after.is_empty() => write!(f, "auto: {rule}")?,
            Chosen::Auto {
                rule,
                taken,
                fell_back_after,
            } => write!(
                f,
                "auto: {rule}; fell back to {taken} after: {}",
                fell_back_after.join("; ")
            )?,
            Chosen::Registered => f.write_str(
                "registered memory the caller owns (cudaHostRegister): never-mapped USE_HOST_PTR buffers",
            )?,
            Chosen::Mapped(m) => write!(f, "mapped memory kernels use in place: {m}, {}", m.basis())?,
        }
        if self.progressive {
            f.write_str("; pinned progressively, chunk by chunk, as the stream goes")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fallback_keeps_what_failed_as_data() {
        let rule = AutoRule {
            rule: "NVIDIA driver: register first",
            disagree: vec![],
        };
        let mut r = StrategyReason::new(Chosen::Auto {
            rule,
            taken: Strategy::NvHost,
            fell_back_after: vec!["register: out of memory".into()],
        });
        assert_eq!(
            r.to_string(),
            "auto: NVIDIA driver: register first; fell back to nv-host after: register: out of memory"
        );
        r.progressive = true;
        assert!(r
            .to_string()
            .ends_with("; pinned progressively, chunk by chunk, as the stream goes"));
        let forced = StrategyReason::new(Chosen::Forced(Strategy::NvHost));
        assert_eq!(forced.to_string(), "forced: nv-host asked for by name");
    }
}
