//! The two sorts Redis applies to SORT's and the geo searches' results, ported so that elements comparing
//! equal come out where Redis puts them: `qsort`, which glibc implements as a stable top-down merge sort,
//! and Redis's own `pqsort`, the partial quicksort of Bentley & McIlroy's "Engineering a Sort Function"
//! that only orders the positions a LIMIT or COUNT keeps. Both take a comparator that may be inconsistent
//! (a NaN distance): they never panic on one and do what the C code does with it.
use std::cmp::Ordering;

/// glibc's `qsort` (msort.c): split at n / 2, sort both halves, merge taking from the left half on ties.
pub fn merge_sort<T>(items: &mut Vec<T>, mut compare: impl FnMut(&T, &T) -> Ordering) {
    let mut order: Vec<usize> = (0..items.len()).collect();
    let mut merged = Vec::with_capacity(items.len());
    merge_sort_indexes(&mut order, &mut merged, &mut |a, b| {
        compare(&items[a], &items[b])
    });
    permute(items, &order);
}

fn merge_sort_indexes(
    order: &mut [usize],
    merged: &mut Vec<usize>,
    compare: &mut impl FnMut(usize, usize) -> Ordering,
) {
    let len = order.len();
    if len <= 1 {
        return;
    }
    let (left, right) = order.split_at_mut(len / 2);
    merge_sort_indexes(left, merged, compare);
    merge_sort_indexes(right, merged, compare);
    merged.clear();
    let (mut from_left, mut from_right) = (0, 0);
    while from_left < left.len() && from_right < right.len() {
        if compare(left[from_left], right[from_right]) != Ordering::Greater {
            merged.push(left[from_left]);
            from_left += 1;
        } else {
            merged.push(right[from_right]);
            from_right += 1;
        }
    }
    merged.extend_from_slice(&left[from_left..]);
    // What is left of the right half is already in place.
    order[..merged.len()].copy_from_slice(merged);
}

/// Puts `items` in the order `order` lists their old positions.
fn permute<T>(items: &mut Vec<T>, order: &[usize]) {
    let mut slots: Vec<Option<T>> = items.drain(..).map(Some).collect();
    items.extend(
        order
            .iter()
            .map(|&index| slots[index].take().expect("each position once")),
    );
}

/// Redis's `pqsort(a, n, es, cmp, lrange, rrange)`: afterwards positions `first..=last` hold what a full
/// sort would put there; partitions wholly outside them are left unsorted.
pub fn partial_quicksort<T>(
    items: &mut [T],
    mut compare: impl FnMut(&T, &T) -> Ordering,
    first: usize,
    last: usize,
) {
    let len = items.len();
    Partial {
        items,
        compare: &mut compare,
        first,
        last,
    }
    .sort(0, len);
}

struct Partial<'s, T, C> {
    items: &'s mut [T],
    compare: &'s mut C,
    /// The kept positions, absolute (C compares pointers into the whole array).
    first: usize,
    last: usize,
}

impl<T, C: FnMut(&T, &T) -> Ordering> Partial<'_, T, C> {
    fn cmp(&mut self, a: usize, b: usize) -> Ordering {
        (self.compare)(&self.items[a], &self.items[b])
    }

    fn median_of_3(&mut self, a: usize, b: usize, c: usize) -> usize {
        if self.cmp(a, b) == Ordering::Less {
            if self.cmp(b, c) == Ordering::Less {
                b
            } else if self.cmp(a, c) == Ordering::Less {
                c
            } else {
                a
            }
        } else if self.cmp(b, c) == Ordering::Greater {
            b
        } else if self.cmp(a, c) == Ordering::Less {
            a
        } else {
            c
        }
    }

    /// Swaps the `count` items from `a` with those from `b`, pairwise.
    fn swap_runs(&mut self, a: usize, b: usize, count: usize) {
        for offset in 0..count {
            self.items.swap(a + offset, b + offset);
        }
    }

    /// Whether the partition [start, start + len) holds none of the kept positions.
    fn outside_kept(&self, start: usize, len: usize) -> bool {
        let end = start + len - 1;
        (self.first < start && self.last < start) || (self.first > end && self.last > end)
    }

    /// `_pqsort` on the `len` items from `base`.
    fn sort(&mut self, mut base: usize, mut len: usize) {
        loop {
            if len < 7 {
                for next in base + 1..base + len {
                    let mut at = next;
                    while at > base && self.cmp(at - 1, at) == Ordering::Greater {
                        self.items.swap(at, at - 1);
                        at -= 1;
                    }
                }
                return;
            }
            let mut pivot = base + len / 2;
            if len > 7 {
                let mut low = base;
                let mut high = base + len - 1;
                if len > 40 {
                    let step = len / 8;
                    low = self.median_of_3(low, low + step, low + 2 * step);
                    pivot = self.median_of_3(pivot - step, pivot, pivot + step);
                    high = self.median_of_3(high - 2 * step, high - step, high);
                }
                pivot = self.median_of_3(low, pivot, high);
            }
            self.items.swap(base, pivot);
            // [base+1, pa): equal to the pivot; [pa, pb): less; (pc, pd]: greater; (pd, end): equal.
            let (mut pa, mut pb) = (base + 1, base + 1);
            let (mut pc, mut pd) = (base + len - 1, base + len - 1);
            loop {
                while pb <= pc {
                    let order = self.cmp(pb, base);
                    if order == Ordering::Greater {
                        break;
                    }
                    if order == Ordering::Equal {
                        self.items.swap(pa, pb);
                        pa += 1;
                    }
                    pb += 1;
                }
                while pb <= pc {
                    let order = self.cmp(pc, base);
                    if order == Ordering::Less {
                        break;
                    }
                    if order == Ordering::Equal {
                        self.items.swap(pc, pd);
                        pd -= 1;
                    }
                    pc -= 1;
                }
                if pb > pc {
                    break;
                }
                self.items.swap(pb, pc);
                pb += 1;
                pc -= 1;
            }
            let end = base + len;
            let run = (pa - base).min(pb - pa);
            self.swap_runs(base, pb - run, run);
            let run = (pd - pc).min(end - pd - 1);
            self.swap_runs(pb, end - run, run);
            let less = pb - pa;
            if less > 1 && !self.outside_kept(base, less) {
                self.sort(base, less);
            }
            let greater = pd - pc;
            if greater > 1 {
                base = end - greater;
                len = greater;
                if !self.outside_kept(base, len) {
                    continue;
                }
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn merge_sort_is_stable() {
        let mut pairs = vec![(2, 'a'), (1, 'b'), (2, 'c'), (1, 'd'), (0, 'e')];
        merge_sort(&mut pairs, |a, b| a.0.cmp(&b.0));
        assert_eq!(pairs, [(0, 'e'), (1, 'b'), (1, 'd'), (2, 'a'), (2, 'c')]);
    }

    #[test]
    fn merge_sort_survives_an_inconsistent_comparator() {
        let mut values = vec![3.0, f64::NAN, 1.0, 2.0, f64::NAN, 0.5];
        merge_sort(&mut values, |a, b| {
            if a > b {
                Ordering::Greater
            } else if a == b {
                Ordering::Equal
            } else {
                Ordering::Less
            }
        });
        assert_eq!(values.len(), 6);
    }

    /// Items keyed `(i * 7 + 3) % modulo`, sorted by key over the positions `first..=last`: the ids there
    /// are those Redis's pqsort.c leaves (compiled from Redis 7.0.15's source and run on this input).
    fn partial_ids(len: usize, modulo: usize, first: usize, last: usize) -> Vec<usize> {
        let mut items: Vec<(f64, usize)> = (0..len)
            .map(|i| (((i * 7 + 3) % modulo) as f64, i))
            .collect();
        partial_quicksort(
            &mut items,
            |a, b| a.0.partial_cmp(&b.0).unwrap(),
            first,
            last,
        );
        items[first..=last].iter().map(|item| item.1).collect()
    }

    #[test]
    fn partial_quicksort_orders_ties_as_redis() {
        assert_eq!(partial_ids(8, 2, 0, 2), [1, 5, 3]);
        assert_eq!(partial_ids(6, 2, 0, 1), [1, 3]);
        assert_eq!(
            partial_ids(50, 4, 3, 12),
            [35, 31, 3, 11, 43, 47, 15, 19, 39, 18]
        );
        assert_eq!(
            partial_ids(100, 3, 0, 9),
            [24, 3, 6, 9, 12, 15, 18, 21, 0, 27]
        );
    }

    proptest! {
        /// The kept positions hold what a full sort puts there.
        #[test]
        fn partial_quicksort_sorts_the_kept_positions(
            mut values in proptest::collection::vec(0u16..50, 0..200),
            first in 0usize..200,
            span in 0usize..50,
        ) {
            let mut sorted = values.clone();
            sorted.sort_unstable();
            if values.is_empty() {
                return Ok(());
            }
            let first = first % values.len();
            let last = (first + span).min(values.len() - 1);
            partial_quicksort(&mut values, |a, b| a.cmp(b), first, last);
            prop_assert_eq!(&values[first..=last], &sorted[first..=last]);
        }

        #[test]
        fn merge_sort_matches_a_stable_sort(values in proptest::collection::vec((0u8..5, any::<u16>()), 0..100)) {
            let mut ours = values.clone();
            merge_sort(&mut ours, |a, b| a.0.cmp(&b.0));
            let mut std = values;
            std.sort_by_key(|pair| pair.0);
            prop_assert_eq!(ours, std);
        }
    }
}
