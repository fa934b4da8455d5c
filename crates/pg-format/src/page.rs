//! Page facts: the block sizes PostgreSQL is built with by default, and the
//! data page checksum.

/// `BLCKSZ`: the size of a relation (heap, index, SLRU) page.
pub const BLCKSZ: usize = 8192;

/// `XLOG_BLCKSZ`: the size of a WAL page.
pub const XLOG_BLCKSZ: u32 = 8192;

/// `SizeOfPageHeaderData`: the header every relation page starts with.
pub const PAGE_HEADER_SIZE: usize = 24;

/// `N_SUMS`, `FNV_PRIME` and `checksumBaseOffsets` (storage/checksum_impl.h).
const N_SUMS: usize = 32;
const FNV_PRIME: u32 = 16_777_619;
const CHECKSUM_BASE_OFFSETS: [u32; N_SUMS] = [
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A, 0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C,
    0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA, 0x7B093B5D, 0x98DAFF3C, 0xF718902A, 0x0B1C9CDB,
    0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE, 0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4,
    0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E, 0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
];

/// `pg_checksum_page` (checksum_impl.h): the page's checksum as block
/// `blkno`, computed with `pd_checksum` taken as zero. `page` is `BLCKSZ`
/// bytes.
pub fn checksum_page(page: &[u8], blkno: u32) -> u16 {
    let comp = |sum: u32, value: u32| {
        let tmp = sum ^ value;
        tmp.wrapping_mul(FNV_PRIME) ^ (tmp >> 17)
    };
    let mut sums = CHECKSUM_BASE_OFFSETS;
    for (i, chunk) in page.chunks_exact(4 * N_SUMS).enumerate() {
        for (j, (sum, word)) in sums.iter_mut().zip(chunk.chunks_exact(4)).enumerate() {
            let mut v = word.try_into().map_or(0, u32::from_le_bytes);
            // pd_checksum (bytes 8..10 of the page) counts as zero.
            if i == 0 && j == 2 {
                v &= 0xFFFF_0000;
            }
            *sum = comp(*sum, v);
        }
    }
    for _ in 0..2 {
        for sum in sums.iter_mut() {
            *sum = comp(*sum, 0);
        }
    }
    let result = sums.iter().fold(0u32, |acc, s| acc ^ s) ^ blkno;
    ((result % 65535) + 1) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_ignores_its_own_field_and_depends_on_the_block() {
        let mut page = vec![0u8; BLCKSZ];
        page[100] = 7;
        let sum = checksum_page(&page, 3);
        page[8] = 0xAB;
        page[9] = 0xCD;
        assert_eq!(checksum_page(&page, 3), sum);
        assert_ne!(checksum_page(&page, 4), sum);
        assert_ne!(sum, 0, "PostgreSQL's checksums are never 0");
    }
}
