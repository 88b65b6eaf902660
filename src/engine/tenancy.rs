//! Classes of the pods that share a device, for a kind whose plugin runs
//! pods of one class per device (Metax sGPU, hami-vendors.md 5.5;
//! `DeviceKind::tenancy`):
//!
//! - an **app class**: latency-sensitive (`online`), batch (`offline`), or
//!   neither. A device holding pods takes a classed pod only beside
//!   classed pods, and an unclassed one only beside unclassed ones; a
//!   batch pod never joins a latency-sensitive one (the plugin suspends
//!   batch pods while one runs).
//! - a **sharing policy** (Metax's QoS: `best-effort`, `fixed-share`,
//!   `burst-share`): a device's pods share it under one policy. A pod
//!   that is not latency-sensitive and shares the device (cores below
//!   100) takes a device in use only when the device's policy is its own
//!   or none. The device's policy is the one its pods set; with none
//!   set, the one the plugin registered for it.
//!
//! HAMi reads a device's policy from a cache of changes it expects, then
//! from the register, so two binds in a row can disagree with what the
//! plugin later reports; here the ledger's pods decide, and they are
//! counted per device ([`Tenants`]).

use super::annotations::Annotations;
use super::reason::Reason;
use crate::devices::TenancyKeys;

/// A pod's app class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum AppClass {
    #[default]
    Unclassed,
    /// Latency-sensitive (`online`).
    Online,
    /// Batch (`offline`).
    Offline,
}

/// What a pod is on the devices of a kind with tenancy rules: its app
/// class and its sharing policy (`policy` is 1 + its place in
/// [`TenancyKeys::policies`]; 0 for none). Two bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Tenancy {
    pub class: AppClass,
    pub policy: u8,
}

/// A class or policy annotation the kind does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenancyError {
    pub annotation: &'static str,
    pub problem: String,
}

/// The app class `value` names, if any.
fn class_named(keys: &TenancyKeys, value: &str) -> Option<AppClass> {
    if value == keys.online {
        Some(AppClass::Online)
    } else if value == keys.offline {
        Some(AppClass::Offline)
    } else {
        None
    }
}

/// The number of the sharing policy `value` names (1 + its place in
/// [`TenancyKeys::policies`]), if any.
fn policy_number(keys: &TenancyKeys, value: &str) -> Option<u8> {
    let i = keys.policies.iter().position(|p| *p == value)?;
    u8::try_from(i + 1).ok()
}

impl Tenancy {
    /// A pod's tenancy, from its annotations; a value the kind does not
    /// know is an error (a pod the webhook would have refused). HAMi reads
    /// no policy of a latency-sensitive pod (5.4, 5.5), and neither does
    /// this.
    pub fn parse(keys: &TenancyKeys, a: &impl Annotations) -> Result<Tenancy, TenancyError> {
        let class = match a.annotation(keys.class).map(str::trim) {
            None => AppClass::Unclassed,
            Some(v) => class_named(keys, v).ok_or_else(|| TenancyError {
                annotation: keys.class,
                problem: format!(
                    "{v:?} is not an app class: allowed {:?} or {:?}",
                    keys.online, keys.offline
                ),
            })?,
        };
        let policy = match a.annotation(keys.policy).map(str::trim) {
            _ if class == AppClass::Online => 0,
            None => 0,
            Some(v) => policy_number(keys, v).ok_or_else(|| TenancyError {
                annotation: keys.policy,
                problem: format!(
                    "{v:?} is not a sharing policy: allowed {}",
                    keys.policies.join(", ")
                ),
            })?,
        };
        Ok(Tenancy { class, policy })
    }

    /// A pod's tenancy as the ledger reads it back: a value the kind does
    /// not know reads as none (the pod is there whatever it says).
    pub fn read(keys: &TenancyKeys, a: &impl Annotations) -> Tenancy {
        let value = |key: &str| a.annotation(key).map(str::trim);
        let class = value(keys.class)
            .and_then(|v| class_named(keys, v))
            .unwrap_or_default();
        let policy = value(keys.policy)
            .filter(|_| class != AppClass::Online)
            .and_then(|v| policy_number(keys, v))
            .unwrap_or(0);
        Tenancy { class, policy }
    }

    pub fn is_none(self) -> bool {
        self == Tenancy::default()
    }
}

/// The most sharing policies a kind names.
pub const MAX_POLICIES: usize = 4;

/// The pods of each class on one device, and the sharing policies they
/// set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tenants {
    pub online: u16,
    pub offline: u16,
    /// Pods that set policy `i + 1` and share the device (below 100 cores
    /// of it, and not latency-sensitive: HAMi records no policy for
    /// either).
    policies: [u16; MAX_POLICIES],
}

impl Tenants {
    /// Counts a pod of `tenancy` on the device; `exclusive` when it takes
    /// all 100 cores of it.
    pub fn add(&mut self, tenancy: Tenancy, exclusive: bool) {
        self.change(tenancy, exclusive, |n| n.saturating_add(1));
    }

    /// Forgets what [`Tenants::add`] counted.
    pub fn sub(&mut self, tenancy: Tenancy, exclusive: bool) {
        self.change(tenancy, exclusive, |n| n.saturating_sub(1));
    }

    fn change(&mut self, tenancy: Tenancy, exclusive: bool, f: impl Fn(u16) -> u16) {
        match tenancy.class {
            AppClass::Online => self.online = f(self.online),
            AppClass::Offline => self.offline = f(self.offline),
            AppClass::Unclassed => {}
        }
        let counted = tenancy.class != AppClass::Online && !exclusive;
        if let Some(n) = usize::from(tenancy.policy)
            .checked_sub(1)
            .and_then(|i| self.policies.get_mut(i))
            .filter(|_| counted)
        {
            *n = f(*n);
        }
    }

    /// The policies the device's pods set: `Ok(None)` when none sets one,
    /// `Err(())` when they set several (pods another scheduler placed).
    fn policy(&self) -> Result<Option<u8>, ()> {
        let mut set = self
            .policies
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, _)| u8::try_from(i + 1).unwrap_or(0));
        match (set.next(), set.next()) {
            (None, _) => Ok(None),
            (Some(p), None) => Ok(Some(p)),
            _ => Err(()),
        }
    }

    /// Why a device holding these pods refuses a pod of `tenancy` asking
    /// for `cores` of it (hami-vendors.md 5.5, HAMi's order: app class,
    /// then policy); `None` when it takes it. `idle`: the device holds no
    /// pod. `registered`: the policy the plugin registered for the device.
    pub fn refuses(
        &self,
        keys: &TenancyKeys,
        (tenancy, cores): (Tenancy, u32),
        idle: bool,
        registered: &str,
    ) -> Option<Reason> {
        if idle {
            return None;
        }
        let classed = |c: AppClass| c != AppClass::Unclassed;
        let device_classed = self.online > 0 || self.offline > 0;
        if device_classed != classed(tenancy.class)
            || (self.online > 0 && tenancy.class == AppClass::Offline)
        {
            return Some(Reason::CardAppClassMismatch);
        }
        if tenancy.class == AppClass::Online || cores >= 100 {
            return None;
        }
        let device = match self.policy() {
            Ok(Some(p)) => Some(p),
            Ok(None) if registered.is_empty() => None,
            // A policy the kind does not know equals no pod's.
            Ok(None) => Some(policy_number(keys, registered).unwrap_or(u8::MAX)),
            Err(()) => Some(u8::MAX),
        };
        match device {
            Some(p) if p != tenancy.policy => Some(Reason::CardQosPolicyMismatch),
            _ => None,
        }
    }

    /// The order a latency-sensitive pod takes devices in (HAMi's
    /// `prioritizeOnlineDevices`, 5.5): fewest latency-sensitive pods, then
    /// fewest batch pods, and a device holding batch pods only last.
    pub fn online_order(&self) -> (bool, u16, u16) {
        let only_offline = self.online == 0 && self.offline > 0;
        if only_offline {
            (true, self.offline, 0)
        } else {
            (false, self.online, self.offline)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const KEYS: TenancyKeys = TenancyKeys {
        class: "c",
        online: "online",
        offline: "offline",
        policy: "q",
        policies: &["best-effort", "fixed-share", "burst-share"],
    };

    fn t(class: AppClass, policy: u8) -> Tenancy {
        Tenancy { class, policy }
    }

    #[test]
    fn parse_and_read() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let a = map(&[("c", "offline"), ("q", "fixed-share")]);
        assert_eq!(Tenancy::parse(&KEYS, &a), Ok(t(AppClass::Offline, 2)));
        // An online pod's policy is not read, whatever it says (5.4).
        let online = map(&[("c", "online"), ("q", "gold")]);
        assert_eq!(Tenancy::parse(&KEYS, &online), Ok(t(AppClass::Online, 0)));
        assert_eq!(Tenancy::read(&KEYS, &online), t(AppClass::Online, 0));
        let bad: BTreeMap<String, String> = [("c".to_string(), "gold".to_string())].into();
        let e = Tenancy::parse(&KEYS, &bad).unwrap_err();
        assert_eq!(e.annotation, "c");
        assert!(e.problem.contains("\"gold\""), "{}", e.problem);
        assert_eq!(Tenancy::read(&KEYS, &bad), Tenancy::default());
    }

    #[test]
    fn app_class_rule() {
        // hami-vendors.md 5.5: idle devices take anyone; classed pods only
        // beside classed pods; offline never beside online.
        let mut online = Tenants::default();
        online.add(t(AppClass::Online, 0), false);
        let mut offline = Tenants::default();
        offline.add(t(AppClass::Offline, 1), false);
        let mut plain = Tenants::default();
        plain.add(t(AppClass::Unclassed, 1), false);
        let r = |d: &Tenants, c: AppClass| d.refuses(&KEYS, (t(c, 1), 10), false, "");
        assert_eq!(r(&online, AppClass::Online), None);
        assert_eq!(
            r(&online, AppClass::Offline),
            Some(Reason::CardAppClassMismatch)
        );
        assert_eq!(
            r(&online, AppClass::Unclassed),
            Some(Reason::CardAppClassMismatch)
        );
        assert_eq!(r(&offline, AppClass::Online), None);
        assert_eq!(r(&offline, AppClass::Offline), None);
        assert_eq!(
            r(&plain, AppClass::Online),
            Some(Reason::CardAppClassMismatch)
        );
        assert_eq!(r(&plain, AppClass::Unclassed), None);
        assert_eq!(
            plain.refuses(&KEYS, (t(AppClass::Online, 0), 10), true, ""),
            None
        );
    }

    #[test]
    fn policy_rule() {
        let mut fixed = Tenants::default();
        fixed.add(t(AppClass::Unclassed, 2), false);
        let ask = |p: u8, cores: u32| (t(AppClass::Unclassed, p), cores);
        assert_eq!(fixed.refuses(&KEYS, ask(2, 10), false, ""), None);
        assert_eq!(
            fixed.refuses(&KEYS, ask(1, 10), false, ""),
            Some(Reason::CardQosPolicyMismatch)
        );
        // The pods decide over the register; an exclusive request is not
        // checked.
        assert_eq!(
            fixed.refuses(&KEYS, ask(1, 10), false, "best-effort"),
            Some(Reason::CardQosPolicyMismatch)
        );
        assert_eq!(fixed.refuses(&KEYS, ask(1, 100), false, ""), None);
        // No pod sets one: the register's, none taking anyone.
        let mut exclusive = Tenants::default();
        exclusive.add(t(AppClass::Unclassed, 2), true);
        assert_eq!(exclusive.refuses(&KEYS, ask(1, 10), false, ""), None);
        assert_eq!(
            exclusive.refuses(&KEYS, ask(1, 10), false, "burst-share"),
            Some(Reason::CardQosPolicyMismatch)
        );
        assert_eq!(
            exclusive.refuses(&KEYS, ask(3, 10), false, "burst-share"),
            None
        );
        // Forgotten, the pod's policy no longer counts.
        fixed.sub(t(AppClass::Unclassed, 2), false);
        assert_eq!(fixed, Tenants::default());
    }

    #[test]
    fn online_order_puts_batch_only_devices_last() {
        let mut a = Tenants::default();
        a.add(t(AppClass::Online, 0), false);
        let mut b = Tenants::default();
        b.add(t(AppClass::Offline, 0), false);
        let idle = Tenants::default();
        let mut order = [a, b, idle];
        order.sort_by_key(Tenants::online_order);
        assert_eq!(order, [idle, a, b]);
    }
}
