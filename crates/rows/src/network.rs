//! inet, cidr, macaddr, macaddr8.
//!
//! inet/cidr are stored as `inet_struct` (utils/inet.h) in a varlena:
//! family (`PGSQL_AF_INET` = 2, `PGSQL_AF_INET6` = 3), netmask bits, then
//! only the address bytes the family uses. Text output follows
//! `network_out` and port/inet_net_ntop.c: IPv4 as four octets, IPv6 with
//! the longest run (≥ 2) of zero words as `::` and an embedded IPv4 tail
//! for the compatible/mapped forms; `/bits` unless it is the full length —
//! always for cidr.

use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::error::DatumError;
use crate::value::InetValue;

const PGSQL_AF_INET: u8 = 2;
const PGSQL_AF_INET6: u8 = 3;

pub(crate) fn decode_inet(p: &[u8], is_cidr: bool) -> Result<InetValue, DatumError> {
    let name = if is_cidr { "cidr" } else { "inet" };
    let (Some(&family), Some(&bits), Some(addr)) = (p.first(), p.get(1), p.get(2..)) else {
        return Err(DatumError::bad(name, "shorter than its header"));
    };
    let (len, max_bits) = match family {
        PGSQL_AF_INET => (4, 32),
        PGSQL_AF_INET6 => (16, 128),
        _ => return Err(DatumError::bad(name, format!("address family {family}"))),
    };
    if addr.len() != len {
        return Err(DatumError::bad(
            name,
            format!("{} address bytes for family {family}", addr.len()),
        ));
    }
    if bits > max_bits {
        return Err(DatumError::bad(name, format!("{bits} netmask bits")));
    }
    Ok(InetValue {
        addr: addr.to_vec(),
        bits,
        is_cidr,
    })
}

fn write_ipv6(out: &mut String, a: &[u8; 16]) {
    let words: Vec<u16> = a
        .chunks_exact(2)
        .map(|c| {
            u16::from_be_bytes([
                c.first().copied().unwrap_or(0),
                c.get(1).copied().unwrap_or(0),
            ])
        })
        .collect();
    let word = |i: usize| words.get(i).copied().unwrap_or(0);
    // The first longest run of zero words, if at least 2 long.
    // (first word, length) of zero runs.
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for i in 0..8 {
        if word(i) == 0 {
            cur = Some(cur.map_or((i, 1), |(b, l)| (b, l + 1)));
        } else if let Some(c) = cur.take()
            && best.is_none_or(|b| c.1 > b.1)
        {
            best = Some(c);
        }
    }
    if let Some(c) = cur
        && best.is_none_or(|b| c.1 > b.1)
    {
        best = Some(c);
    }
    let best = best.filter(|b| b.1 >= 2);
    for i in 0..8 {
        if let Some((base, len)) = best
            && i >= base
            && i < base + len
        {
            if i == base {
                out.push(':');
            }
            continue;
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6
            && let Some((0, len)) = best
            && (len == 6 || (len == 7 && word(7) != 0x0001) || (len == 5 && word(5) == 0xffff))
        {
            let _ = write!(out, "{}", Ipv4Addr::new(a[12], a[13], a[14], a[15]));
            return;
        }
        let _ = write!(out, "{:x}", word(i));
    }
    if let Some((base, len)) = best
        && base + len == 8
    {
        out.push(':');
    }
}

pub(crate) fn write_inet(out: &mut String, v: &InetValue) {
    let max_bits = match v.addr.len() {
        4 => {
            let mut a = [0u8; 4];
            a.copy_from_slice(&v.addr);
            let _ = write!(out, "{}", Ipv4Addr::from(a));
            32
        }
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&v.addr);
            write_ipv6(out, &a);
            128
        }
        // Not a valid value; shown rather than hidden.
        _ => {
            for (i, b) in v.addr.iter().enumerate() {
                let _ = write!(out, "{}{b}", if i > 0 { "." } else { "" });
            }
            0
        }
    };
    if v.is_cidr || v.bits != max_bits {
        let _ = write!(out, "/{}", v.bits);
    }
}

pub(crate) fn parse_inet(s: &str, is_cidr: bool) -> Result<InetValue, String> {
    let (addr, bits) = match s.split_once('/') {
        Some((a, b)) => (
            a,
            Some(
                b.parse::<u8>()
                    .map_err(|_| format!("bad netmask in {s:?}"))?,
            ),
        ),
        None => (s, None),
    };
    let (addr, max): (Vec<u8>, u8) = if let Ok(a) = addr.parse::<Ipv4Addr>() {
        (a.octets().to_vec(), 32)
    } else if let Ok(a) = addr.parse::<Ipv6Addr>() {
        (a.octets().to_vec(), 128)
    } else {
        return Err(format!("{s:?} is not an address"));
    };
    let bits = bits.unwrap_or(max);
    if bits > max {
        return Err(format!("bad netmask in {s:?}"));
    }
    Ok(InetValue {
        addr,
        bits,
        is_cidr,
    })
}

pub(crate) fn write_mac(out: &mut String, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        let _ = write!(out, "{}{b:02x}", if i > 0 { ":" } else { "" });
    }
}

pub(crate) fn parse_mac<const N: usize>(s: &str) -> Result<[u8; N], String> {
    let mut out = [0u8; N];
    let mut parts = s.split(':');
    for b in out.iter_mut() {
        let p = parts
            .next()
            .ok_or_else(|| format!("{s:?} is not a MAC address"))?;
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?} is not a MAC address"))?;
    }
    if parts.next().is_some() {
        return Err(format!("{s:?} is not a MAC address"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(s: &str, cidr: bool) -> String {
        let mut out = String::new();
        write_inet(&mut out, &parse_inet(s, cidr).unwrap());
        out
    }

    #[test]
    fn inet_text_like_postgres() {
        for (input, cidr, want) in [
            ("192.168.1.5", false, "192.168.1.5"),
            ("192.168.1.5/24", false, "192.168.1.5/24"),
            ("10.0.0.0/8", true, "10.0.0.0/8"),
            ("10.1.2.3/32", true, "10.1.2.3/32"),
            ("::1", false, "::1"),
            ("::", false, "::"),
            ("::2", false, "::2"),
            ("::ffff:0:1.2.3.4", false, "::ffff:0:102:304"),
            ("::ffff:1.2.3.4", false, "::ffff:1.2.3.4"),
            ("::1.2.3.4", false, "::1.2.3.4"),
            ("2001:db8::1", false, "2001:db8::1"),
            ("2001:db8:0:0:1:0:0:1", false, "2001:db8::1:0:0:1"),
            ("2001:0:0:1:0:0:0:1", false, "2001:0:0:1::1"),
            ("1:0:1:0:1:0:1:0", false, "1:0:1:0:1:0:1:0"),
            ("fe80::/10", true, "fe80::/10"),
            ("2001:db8::/128", true, "2001:db8::/128"),
            ("1::", false, "1::"),
        ] {
            assert_eq!(show(input, cidr), want, "{input}");
        }
    }

    #[test]
    fn stored_inet() {
        let v = decode_inet(&[2, 24, 10, 0, 0, 1], false).unwrap();
        assert_eq!((v.addr.as_slice(), v.bits), (&[10, 0, 0, 1][..], 24));
        assert!(decode_inet(&[2, 33, 10, 0, 0, 1], false).is_err());
        assert!(decode_inet(&[3, 24, 10, 0, 0, 1], false).is_err());
        assert!(decode_inet(&[9, 0], false).is_err());
        assert!(decode_inet(&[2], false).is_err());
    }

    #[test]
    fn macs() {
        let m: [u8; 6] = parse_mac("08:00:2b:01:02:03").unwrap();
        let mut s = String::new();
        write_mac(&mut s, &m);
        assert_eq!(s, "08:00:2b:01:02:03");
        assert!(parse_mac::<6>("08:00:2b:01:02").is_err());
        assert!(parse_mac::<6>("08:00:2b:01:02:03:04").is_err());
    }
}
