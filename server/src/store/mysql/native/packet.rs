//! Multi-row statements cut to the server's `max_allowed_packet`.
//!
//! A statement travels to the server as one command: for a prepared statement
//! (every statement with parameters here), its parameters and their framing.
//! The server refuses a command larger than its `max_allowed_packet` (error
//! 1153) and closes the connection. A statement built from request data (the
//! rows of combined Submits, their events) is therefore cut by bytes as well as
//! by rows; the server's limit is read when the store connects.

/// Bytes of framing the binary protocol adds to one parameter at most: its
/// type (2), its length prefix (up to 9) and its bit in the NULL bitmap.
pub(crate) const PARAM_FRAMING: usize = 12;

/// The bytes of parameters one statement may carry under a server whose
/// `max_allowed_packet` is `max_allowed_packet`: an eighth of it (at least
/// 64 KiB) is kept for the command's header and for estimates that fall short.
pub(crate) fn budget(max_allowed_packet: u64) -> usize {
    let packet = usize::try_from(max_allowed_packet).unwrap_or(usize::MAX);
    let margin = (packet / 8).max(64 * 1024);
    packet.saturating_sub(margin).max(1)
}

/// What a parameter of `len` bytes adds to a statement.
pub(crate) fn param(len: usize) -> usize {
    len + PARAM_FRAMING
}

/// What an optional text parameter adds to a statement.
pub(crate) fn opt_param(s: Option<&str>) -> usize {
    param(s.map_or(0, str::len))
}

/// Cuts `items` into runs, in order, of at most `rows` items whose `size`s add
/// up to at most `bytes`. An item larger than `bytes` is a run of its own: the
/// server refuses it as it would any statement that large (the service's size
/// limits keep single rows far below a server's packet).
pub(crate) fn pieces<T>(
    items: &[T],
    rows: usize,
    bytes: usize,
    size: impl Fn(&T) -> usize,
) -> Vec<&[T]> {
    let rows = rows.max(1);
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0usize);
    for (i, item) in items.iter().enumerate() {
        let s = size(item);
        if i > start && (i - start == rows || used.saturating_add(s) > bytes) {
            out.push(&items[start..i]);
            (start, used) = (i, 0);
        }
        used = used.saturating_add(s);
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lens(p: &[&[usize]]) -> Vec<usize> {
        p.iter().map(|r| r.len()).collect()
    }

    #[test]
    fn pieces_are_cut_by_rows_and_by_bytes_in_order() {
        let items: Vec<usize> = vec![10; 7];
        assert_eq!(lens(&pieces(&items, 3, 1000, |&s| s)), [3, 3, 1]);
        assert_eq!(lens(&pieces(&items, 100, 25, |&s| s)), [2, 2, 2, 1]);
        assert_eq!(lens(&pieces(&items, 100, 30, |&s| s)), [3, 3, 1]);
        let flat: Vec<usize> = pieces(&items, 2, 15, |&s| s).concat();
        assert_eq!(flat, items);
    }

    #[test]
    fn an_item_over_the_budget_goes_alone() {
        let items = vec![5, 50, 5, 5];
        assert_eq!(lens(&pieces(&items, 100, 20, |&s| s)), [1, 1, 2]);
        assert!(pieces(&[] as &[usize], 10, 10, |&s| s).is_empty());
    }

    #[test]
    fn the_budget_keeps_a_margin() {
        assert_eq!(budget(16 << 20), (16 << 20) - (2 << 20));
        assert_eq!(budget(256 * 1024), 192 * 1024);
        assert_eq!(budget(1024), 1);
    }
}
