//! `sdt-example`: a toy order pipeline instrumented with USDT probes.
//!
//! It processes an order every `--interval-ms` milliseconds (default 100),
//! `--orders` times or until it is killed, and fires the `shop` probes
//! declared below. Try:
//!
//! ```text
//! cargo build --release -p sdt-cli -p sdt-example
//! sdt list target/release/sdt-example
//! sdt trace -c 'target/release/sdt-example --orders 20' -s 1:2 shop:order_received
//! sdt trace -c 'target/release/sdt-example --orders 20' -s 0:1 shop:inventory
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

sdt::provider! {
    /// The order pipeline.
    mod shop {
        /// An order arrived: its id, the customer (two slots: pointer and
        /// length) and the amount in cents.
        fn order_received(id: u64, customer: &str, cents: i64);
        /// An order was charged: its id, the amount in cents and how long
        /// the charge took in microseconds.
        fn order_charged(id: u64, cents: i64, micros: u32);
        /// A charge was declined: the order's id and a negative error code.
        fn order_declined(id: u64, code: i32);
        /// A text summary of the stock (two slots) and the number of items.
        /// Building the summary is expensive, so it happens only while this
        /// probe is traced.
        fn inventory(summary: &str, items: u32);
    }
}

const CUSTOMERS: [&str; 4] = ["ada", "grace", "barbara", "margaret"];
const PRODUCTS: [&str; 3] = ["tea", "scones", "jam"];

struct Options {
    orders: Option<u64>,
    interval: Duration,
}

fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("sdt-example: {message}");
            eprintln!("usage: sdt-example [--orders N] [--interval-ms MS]");
            return ExitCode::from(2);
        }
    };
    let mut stock = [100u32; PRODUCTS.len()];
    let mut id = 0u64;
    while options.orders.is_none_or(|orders| id < orders) {
        process(id, &mut stock);
        id += 1;
        std::thread::sleep(options.interval);
    }
    ExitCode::SUCCESS
}

fn process(id: u64, stock: &mut [u32; PRODUCTS.len()]) {
    let customer = CUSTOMERS[(id % CUSTOMERS.len() as u64) as usize];
    let product = (id % PRODUCTS.len() as u64) as usize;
    let cents = 250 + (id % 7) as i64 * 125;
    shop::order_received!(id, customer, cents);

    let start = Instant::now();
    if id % 10 == 9 {
        shop::order_declined!(id, -((id % 3) as i32) - 1);
        return;
    }
    stock[product] = stock[product].checked_sub(1).unwrap_or(100);
    let micros = u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX);
    shop::order_charged!(id, cents, micros);

    // The summary is an argument, so it is built only while traced.
    shop::inventory!(&summary(stock), stock.iter().sum::<u32>());
}

/// `tea=99 scones=100 jam=100`: allocates, which is why only a traced
/// probe asks for it.
fn summary(stock: &[u32]) -> String {
    PRODUCTS
        .iter()
        .zip(stock)
        .map(|(name, count)| format!("{name}={count}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        orders: None,
        interval: Duration::from_millis(100),
    };
    while let Some(flag) = args.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            let value = args.next().ok_or(format!("{name} needs a value"))?;
            value.parse().map_err(|e| format!("{name} {value}: {e}"))
        };
        match flag.as_str() {
            "--orders" => options.orders = Some(number("--orders")?),
            "--interval-ms" => options.interval = Duration::from_millis(number("--interval-ms")?),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(options)
}
