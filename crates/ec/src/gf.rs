//! GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d) and generator 2: the
//! field of ISA-L, Jerasure, klauspost/reedsolomon and reed-solomon-erasure, so byte
//! values mean the same thing in all of them.
//!
//! Addition is XOR. Multiplication goes through log/exp tables; the slice kernels use
//! the per-constant tables below instead ([`NIBBLES`] for byte shuffles, [`AFFINE`] for
//! GFNI), all computed at compile time.

/// The reduction polynomial, with its x^8 bit.
pub const POLYNOMIAL: u16 = 0x11d;

/// `EXP[i] = 2^i`, doubled in length so that `EXP[log a + log b]` needs no reduction.
const EXP: [u8; 512] = {
    let mut exp = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    exp[510] = exp[0];
    exp[511] = exp[1];
    exp
};

/// `LOG[a]` for a != 0; `LOG[0]` is unused.
const LOG: [u8; 256] = {
    let mut log = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        log[EXP[i] as usize] = i as u8;
        i += 1;
    }
    log
};

/// The product of two field elements.
#[inline]
pub const fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
}

/// The multiplicative inverse; `None` for zero, which has none.
#[inline]
pub const fn inv(a: u8) -> Option<u8> {
    if a == 0 {
        return None;
    }
    Some(EXP[255 - LOG[a as usize] as usize])
}

/// `a / b`; `None` when `b` is zero.
#[inline]
pub const fn div(a: u8, b: u8) -> Option<u8> {
    match inv(b) {
        Some(inverse) => Some(mul(a, inverse)),
        None => None,
    }
}

/// `a^n`.
pub const fn pow(a: u8, n: u32) -> u8 {
    let mut result = 1u8;
    let mut i = 0;
    while i < n {
        result = mul(result, a);
        i += 1;
    }
    result
}

/// The products of a constant with every byte value: row `c` is `c * x` for all `x`.
/// 64 KiB; the portable kernel's table.
pub(crate) static MUL: [[u8; 256]; 256] = {
    let mut table = [[0u8; 256]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 256 {
            table[c][x] = mul(c as u8, x as u8);
            x += 1;
        }
        c += 1;
    }
    table
};

/// For each constant `c`, the products with the low and the high nibble:
/// `c * x = low[x & 15] ^ high[x >> 4]`. A byte shuffle looks up 16 or 32 or 64 bytes
/// at once in such a 16-entry table.
#[derive(Clone, Copy)]
pub(crate) struct Nibbles {
    pub(crate) low: [u8; 16],
    pub(crate) high: [u8; 16],
}

pub(crate) static NIBBLES: [Nibbles; 256] = {
    let mut table = [Nibbles { low: [0; 16], high: [0; 16] }; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            table[c].low[x] = mul(c as u8, x as u8);
            table[c].high[x] = mul(c as u8, (x << 4) as u8);
            x += 1;
        }
        c += 1;
    }
    table
};

/// For each constant `c`, the 8x8 bit matrix of "multiply by c", in the layout of the
/// GFNI instruction `GF2P8AFFINEQB`: bit `i` of the result is the parity of
/// `x & row_i`, where row `i` is byte `7 - i` of the matrix. Multiplication by a
/// constant is linear over GF(2), so it is such a matrix whatever the polynomial (the
/// instruction's own multiply, `GF2P8MULB`, is fixed to a different polynomial).
pub(crate) static AFFINE: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        let mut matrix = 0u64;
        let mut i = 0;
        while i < 8 {
            // Row i: the input bits j whose product c * 2^j has bit i set.
            let mut row = 0u64;
            let mut j = 0;
            while j < 8 {
                if (mul(c as u8, 1 << j) >> i) & 1 == 1 {
                    row |= 1 << j;
                }
                j += 1;
            }
            matrix |= row << (8 * (7 - i));
            i += 1;
        }
        table[c] = matrix;
        c += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Multiplication by shift-and-reduce, independent of the tables.
    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut product = 0u8;
        while b != 0 {
            if b & 1 == 1 {
                product ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= (POLYNOMIAL & 0xff) as u8;
            }
            b >>= 1;
        }
        product
    }

    #[test]
    fn tables_agree_with_shift_and_reduce_for_every_pair() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                let expected = slow_mul(a, b);
                assert_eq!(mul(a, b), expected, "{a} * {b}");
                assert_eq!(MUL[a as usize][b as usize], expected);
                let nibbles = NIBBLES[a as usize];
                assert_eq!(
                    nibbles.low[(b & 15) as usize] ^ nibbles.high[(b >> 4) as usize],
                    expected
                );
            }
        }
    }

    #[test]
    fn every_nonzero_element_has_an_inverse() {
        assert_eq!(inv(0), None);
        for a in 1..=255u8 {
            let inverse = inv(a).unwrap();
            assert_eq!(mul(a, inverse), 1, "{a}");
            assert_eq!(div(a, a), Some(1));
        }
        // 2 generates the multiplicative group: its powers take all 255 values.
        let powers: std::collections::BTreeSet<u8> = (0..255).map(|n| pow(2, n)).collect();
        assert_eq!(powers.len(), 255);
    }

    #[test]
    fn affine_matrices_multiply() {
        // Apply the matrix the way GF2P8AFFINEQB does, bit by bit.
        fn affine(matrix: u64, x: u8) -> u8 {
            let mut out = 0u8;
            for i in 0..8 {
                let row = (matrix >> (8 * (7 - i))) as u8;
                out |= (((row & x).count_ones() & 1) as u8) << i;
            }
            out
        }
        for c in 0..=255u8 {
            for x in 0..=255u8 {
                assert_eq!(affine(AFFINE[c as usize], x), mul(c, x), "{c} * {x}");
            }
        }
    }
}
