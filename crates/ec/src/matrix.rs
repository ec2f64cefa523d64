//! Small dense matrices over GF(2^8): the generator, its square sub-matrices and their
//! inverses. Sizes are at most 256 x 256, so plain Gauss-Jordan elimination is enough.

use crate::gf;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl Matrix {
    pub(crate) fn zero(rows: usize, cols: usize) -> Matrix {
        Matrix { rows, cols, data: vec![0; rows * cols] }
    }

    pub(crate) fn identity(n: usize) -> Matrix {
        let mut m = Matrix::zero(n, n);
        for i in 0..n {
            m.set(i, i, 1);
        }
        m
    }

    pub(crate) fn from_rows(rows: usize, cols: usize, data: Vec<u8>) -> Matrix {
        assert_eq!(data.len(), rows * cols);
        Matrix { rows, cols, data }
    }

    pub(crate) fn get(&self, row: usize, col: usize) -> u8 {
        self.data[row * self.cols + col]
    }

    pub(crate) fn set(&mut self, row: usize, col: usize, value: u8) {
        self.data[row * self.cols + col] = value;
    }

    pub(crate) fn into_data(self) -> Vec<u8> {
        self.data
    }

    pub(crate) fn mul(&self, other: &Matrix) -> Matrix {
        assert_eq!(self.cols, other.rows);
        let mut out = Matrix::zero(self.rows, other.cols);
        for i in 0..self.rows {
            for j in 0..other.cols {
                let mut sum = 0;
                for t in 0..self.cols {
                    sum ^= gf::mul(self.get(i, t), other.get(t, j));
                }
                out.set(i, j, sum);
            }
        }
        out
    }

    /// The inverse, or `None` if the matrix is singular.
    pub(crate) fn invert(&self) -> Option<Matrix> {
        assert_eq!(self.rows, self.cols);
        let n = self.rows;
        let mut a = self.clone();
        let mut inv = Matrix::identity(n);
        for col in 0..n {
            let pivot = (col..n).find(|&row| a.get(row, col) != 0)?;
            if pivot != col {
                a.swap_rows(pivot, col);
                inv.swap_rows(pivot, col);
            }
            let scale = gf::inv(a.get(col, col))?;
            a.scale_row(col, scale);
            inv.scale_row(col, scale);
            for row in 0..n {
                let factor = a.get(row, col);
                if row != col && factor != 0 {
                    a.add_scaled_row(col, row, factor);
                    inv.add_scaled_row(col, row, factor);
                }
            }
        }
        Some(inv)
    }

    /// The rank, by elimination on a copy.
    pub(crate) fn rank(&self) -> usize {
        let mut a = self.clone();
        let mut rank = 0;
        for col in 0..a.cols {
            let Some(pivot) = (rank..a.rows).find(|&row| a.get(row, col) != 0) else { continue };
            a.swap_rows(pivot, rank);
            let scale = gf::inv(a.get(rank, col)).unwrap_or(1);
            a.scale_row(rank, scale);
            for row in 0..a.rows {
                let factor = a.get(row, col);
                if row != rank && factor != 0 {
                    a.add_scaled_row(rank, row, factor);
                }
            }
            rank += 1;
        }
        rank
    }

    fn swap_rows(&mut self, a: usize, b: usize) {
        for col in 0..self.cols {
            self.data.swap(a * self.cols + col, b * self.cols + col);
        }
    }

    fn scale_row(&mut self, row: usize, factor: u8) {
        for value in &mut self.data[row * self.cols..(row + 1) * self.cols] {
            *value = gf::mul(*value, factor);
        }
    }

    /// `row[to] += factor * row[from]`.
    fn add_scaled_row(&mut self, from: usize, to: usize, factor: u8) {
        for col in 0..self.cols {
            let add = gf::mul(self.get(from, col), factor);
            self.data[to * self.cols + col] ^= add;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_times_matrix_is_identity() {
        let m = Matrix::from_rows(3, 3, vec![1, 2, 3, 4, 5, 6, 7, 8, 10]);
        let inv = m.invert().unwrap();
        assert_eq!(m.mul(&inv), Matrix::identity(3));
        assert_eq!(inv.mul(&m), Matrix::identity(3));
        assert_eq!(m.rank(), 3);
    }

    #[test]
    fn singular_matrices_have_no_inverse() {
        // Row 2 = row 0 + row 1 (addition is XOR).
        let m = Matrix::from_rows(3, 3, vec![1, 2, 3, 4, 5, 6, 1 ^ 4, 2 ^ 5, 3 ^ 6]);
        assert_eq!(m.invert(), None);
        assert_eq!(m.rank(), 2);
    }
}
