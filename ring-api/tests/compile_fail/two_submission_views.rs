//! Two live submission views would be two producers with separate cached tails.
use ring_api::opcode::Nop;
use ring_api::queue_pair;

fn main() {
    let (mut app, _worker) = queue_pair(8, 8, None).unwrap();
    let mut a = app.submission();
    let mut b = app.submission();
    a.push(&Nop::new().build()).unwrap();
    b.push(&Nop::new().build()).unwrap();
}
