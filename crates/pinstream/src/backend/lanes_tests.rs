//! The host views' tests.

use super::HostView;

#[test]
fn spans_follow_the_pieces() {
    let (mut a, mut b) = (vec![0u8; 10], vec![0u8; 6]);
    let v = HostView::writing(vec![&mut a, &mut b]);
    assert_eq!(v.len(), 16);
    let s = v.spans(8..13);
    assert_eq!(s.len(), 2);
    assert_eq!((s[0].0.len, s[0].1), (2, 0));
    assert_eq!((s[1].0.len, s[1].1), (3, 2));
    assert!(v.spans(10..10).is_empty());
}

struct Open;
impl super::Gate for Open {
    fn wait_ready(&self, _: usize) -> Result<(), String> {
        Ok(())
    }
}

#[test]
fn a_ring_view_maps_each_turn_onto_its_pieces() {
    let (mut a, mut b) = (vec![0u8; 8], vec![0u8; 8]);
    let base = b.as_ptr() as usize;
    let spans = |p: &mut Vec<u8>| super::HostSpan {
        ptr: p.as_mut_ptr(),
        len: p.len(),
    };
    // SAFETY: the test's vectors outlive the view and nothing else touches them.
    let v = unsafe {
        HostView::ring(
            vec![spans(&mut a), spans(&mut b)],
            100,
            true,
            std::sync::Arc::new(Open),
        )
    };
    assert_eq!(v.len(), 100);
    let s = v.spans(40..44); // 40 % 16 = 8: the start of `b`
    assert_eq!((s[0].0.ptr as usize, s[0].0.len), (base, 4));
    assert!(v.is_gated());
    let crossing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| v.spans(12..20)));
    assert!(
        crossing.is_err(),
        "a transfer across the ring's end is a bug"
    );
}

#[test]
#[should_panic(expected = "outside a view")]
fn a_range_past_the_view_is_a_bug() {
    let a = vec![0u8; 4];
    HostView::reading(vec![&a]).spans(2..5);
}
