//! LOLWUT [VERSION v] [args]: Redis 7.0's art, ported. Version 5 draws Georg Nees's Schotter in braille
//! characters (random rotations from the third row of squares down, as Redis's), version 6 a city
//! skyline in terminal grays (random, as Redis's); any other version answers the version line. The
//! version named is Redis's compatible one, as fallow reports everywhere.
use crate::command::reply::REDIS_COMPATIBLE_VERSION;
use crate::command::{is, parse_int, Ctx, NOT_INTEGER};
use rand::Rng;

/// Redis's limits: LOLWUT is always cheap.
const COLUMNS_MAX: i64 = 1000;
const SQUARES_MAX: i64 = 200;
const ROWS_MAX: i64 = 1000;

pub(super) fn lolwut(ctx: &mut Ctx, args: &[&[u8]]) {
    let (version, rest) = if args.len() >= 3 && is(args[1], "version") {
        match parse_int(args[2]) {
            Some(version) => (Some(version), &args[3..]),
            None => return ctx.out.error(NOT_INTEGER),
        }
    } else {
        (None, &args[1..])
    };
    let draws = matches!(version, Some(5 | 6));
    let Some(numbers) = parse_numbers(if draws { rest } else { &[] }) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let mut rng = rand::thread_rng();
    let text = match version {
        Some(5) => schotter_text(&numbers, &mut rng),
        Some(6) => skyline_text(&numbers, &mut rng),
        _ => format!("Redis ver. {REDIS_COMPATIBLE_VERSION}\n"),
    };
    ctx.out.verbatim("txt", text.as_bytes());
}

/// The drawing's numeric arguments (up to three); None when one is not an integer. The version line
/// reads none: `LOLWUT foo` is the version line, as in Redis.
fn parse_numbers(args: &[&[u8]]) -> Option<Vec<i64>> {
    args.iter().take(3).map(|arg| parse_int(arg)).collect()
}

/// Redis's `rand()`: 0..=RAND_MAX.
const RAND_MAX: u32 = i32::MAX as u32;
fn c_rand(rng: &mut impl Rng) -> u32 {
    rng.gen_range(0..=RAND_MAX)
}

// ----- the canvas -----------------------------------------------------------------------------------

struct Canvas {
    width: i64,
    height: i64,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: i64, height: i64, color: u8) -> Canvas {
        debug_assert!(width > 0 && height >= 0);
        Canvas {
            width,
            height,
            pixels: vec![color; (width * height) as usize],
        }
    }

    fn set(&mut self, x: i64, y: i64, color: u8) {
        if (0..self.width).contains(&x) && (0..self.height).contains(&y) {
            self.pixels[(x + y * self.width) as usize] = color;
        }
    }

    fn get(&self, x: i64, y: i64) -> u8 {
        if (0..self.width).contains(&x) && (0..self.height).contains(&y) {
            self.pixels[(x + y * self.width) as usize]
        } else {
            0
        }
    }

    /// Bresenham's line, as Redis's `lwDrawLine`.
    fn line(&mut self, (mut x1, mut y1): (i64, i64), (x2, y2): (i64, i64), color: u8) {
        let (dx, dy) = ((x2 - x1).abs(), (y2 - y1).abs());
        let (sx, sy) = (if x1 < x2 { 1 } else { -1 }, if y1 < y2 { 1 } else { -1 });
        let mut err = dx - dy;
        loop {
            self.set(x1, y1, color);
            if x1 == x2 && y1 == y2 {
                return;
            }
            let e2 = err * 2;
            if e2 > -dy {
                err -= dy;
                x1 += sx;
            }
            if e2 < dx {
                err += dx;
                y1 += sy;
            }
        }
    }

    /// A square of side `size` centred on (x, y), rotated by `angle` (Redis's `lwDrawSquare`).
    fn square(&mut self, (x, y): (i64, i64), size: f32, angle: f32, color: u8) {
        // Redis divides by 1.4142135623 in single precision: the same f32 as SQRT_2.
        let size = (size / std::f32::consts::SQRT_2).round();
        let mut k = std::f32::consts::FRAC_PI_4 + angle;
        let mut corners = [(0i64, 0i64); 4];
        for corner in &mut corners {
            *corner = (
                (k.sin() * size + x as f32).round() as i64,
                (k.cos() * size + y as f32).round() as i64,
            );
            k += std::f32::consts::FRAC_PI_2;
        }
        for index in 0..4 {
            self.line(corners[index], corners[(index + 1) % 4], color);
        }
    }
}

// ----- version 5: Schotter --------------------------------------------------------------------------

fn schotter_text(numbers: &[i64], rng: &mut impl Rng) -> String {
    let columns = numbers.first().copied().unwrap_or(66).clamp(1, COLUMNS_MAX);
    let per_row = numbers.get(1).copied().unwrap_or(8).clamp(1, SQUARES_MAX);
    let per_column = numbers.get(2).copied().unwrap_or(12).clamp(1, SQUARES_MAX);
    let canvas = schotter(columns, per_row, per_column, rng);
    let mut text = braille(&canvas);
    text.push_str(&format!(
        "\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. {REDIS_COMPATIBLE_VERSION}\n"
    ));
    text
}

/// Redis's `lwDrawSchotter`: rows of squares, more displaced and rotated the lower they are.
fn schotter(columns: i64, per_row: i64, per_column: i64, rng: &mut impl Rng) -> Canvas {
    let width = columns * 2;
    let padding = if width > 4 { 2 } else { 0 };
    let side = (width - padding * 2) as f32 / per_row as f32;
    let height = (side * per_column as f32) as i64 + padding * 2;
    let mut canvas = Canvas::new(width, height, 0);
    for y in 0..per_column {
        for x in 0..per_row {
            let mut sx = (x as f32 * side + side / 2.0 + padding as f32) as i64;
            let mut sy = (y as f32 * side + side / 2.0 + padding as f32) as i64;
            let mut angle = 0.0;
            if y > 1 {
                let mut r = [0.0f32; 3];
                for value in &mut r {
                    *value = c_rand(rng) as f32 / RAND_MAX as f32 / per_column as f32 * y as f32;
                }
                for value in &mut r {
                    if c_rand(rng) % 2 == 1 {
                        *value = -*value;
                    }
                }
                let [r1, r2, r3] = r;
                angle = r1;
                sx = (sx as f32 + r2 * side / 3.0) as i64;
                sy = (sy as f32 + r3 * side / 3.0) as i64;
            }
            canvas.square((sx, sy), side, angle, 1);
        }
    }
    canvas
}

/// Redis 5's `renderCanvas`: 2x4 pixels per braille character, a line end after each row of them
/// but one ending on the canvas's last pixel row.
fn braille(canvas: &Canvas) -> String {
    const DOTS: [(i64, i64, u32); 8] = [
        (0, 0, 0),
        (0, 1, 1),
        (0, 2, 2),
        (1, 0, 3),
        (1, 1, 4),
        (1, 2, 5),
        (0, 3, 6),
        (1, 3, 7),
    ];
    let mut text = String::new();
    for y in (0..canvas.height).step_by(4) {
        for x in (0..canvas.width).step_by(2) {
            let byte: u32 = DOTS
                .iter()
                .filter(|(dx, dy, _)| canvas.get(x + dx, y + dy) != 0)
                .map(|(_, _, bit)| 1 << bit)
                .sum();
            text.push(char::from_u32(0x2800 + byte).expect("braille block"));
        }
        if y != canvas.height - 1 {
            text.push('\n');
        }
    }
    text
}

// ----- version 6: the skyline -----------------------------------------------------------------------

fn skyline_text(numbers: &[i64], rng: &mut impl Rng) -> String {
    let columns = numbers.first().copied().unwrap_or(80).clamp(1, COLUMNS_MAX);
    let rows = numbers.get(1).copied().unwrap_or(20).clamp(1, ROWS_MAX);
    let mut canvas = Canvas::new(columns, rows, 3);
    skyline(&mut canvas, rng);
    let mut text = grays(&canvas);
    text.push_str("Dedicated to the 8 bit game developers of past and present.\n");
    text.push_str(&format!(
        "Original 8 bit image from Plaguemon by hikikomori. Redis ver. {REDIS_COMPATIBLE_VERSION}\n"
    ));
    text
}

struct Skyscraper {
    offset: i64,
    width: i64,
    height: i64,
    windows: bool,
    color: u8,
}

/// Redis's `generateSkyline`: two passes of window-less background buildings (the lighter behind),
/// then the black foreground ones with lit windows.
fn skyline(canvas: &mut Canvas, rng: &mut impl Rng) {
    let height = canvas.height;
    let mut random = |modulo: i64| (c_rand(rng) as i64) % modulo;
    for color in [2u8, 1] {
        let mut offset = -10;
        while offset < canvas.width {
            offset += random(8);
            let width = 10 + random(9);
            let tall = if color == 2 {
                height / 2 + random(height) / 2
            } else {
                height / 2 + random(height) / 3
            };
            let building = Skyscraper {
                offset,
                width,
                height: tall,
                windows: false,
                color,
            };
            skyscraper(canvas, &building, &mut random);
            offset += if color == 2 { width / 2 } else { width + 1 };
        }
    }
    let mut offset = -10;
    while offset < canvas.width {
        offset += random(8);
        let mut width = 5 + random(14);
        if width % 4 != 0 {
            width += width % 3;
        }
        let tall = height / 3 + random(height) / 2;
        let building = Skyscraper {
            offset,
            width,
            height: tall,
            windows: true,
            color: 0,
        };
        skyscraper(canvas, &building, &mut random);
        offset += width + 5;
    }
}

/// Redis's `generateSkyscraper`: a roof two pixels narrower each side; windows two pixels wide, one
/// tall, in one of the grays the building is not.
fn skyscraper(canvas: &mut Canvas, building: &Skyscraper, random: &mut impl FnMut(i64) -> i64) {
    let start_y = canvas.height - 1;
    let end_y = start_y - building.height + 1;
    let (left, right) = (building.offset, building.offset + building.width);
    for y in (end_y..=start_y).rev() {
        for x in left..right {
            if y == end_y && (x <= left + 1 || x >= right - 2) {
                continue;
            }
            let mut color = building.color;
            let inside = x > left + 1 && x < right - 2 && y > end_y + 1 && y < start_y - 1;
            if building.windows && inside {
                let (rel_x, rel_y) = (x - (left + 1), y - (end_y + 1));
                if (rel_x / 2) % 2 != 0 && rel_y % 2 != 0 {
                    loop {
                        color = 1 + random(2) as u8;
                        if color != building.color {
                            break;
                        }
                    }
                    if rel_x % 2 != 0 {
                        color = canvas.get(x - 1, y);
                    }
                }
            }
            canvas.set(x, y, color);
        }
    }
}

/// Redis 6's `renderCanvas`: a space per pixel in one of four terminal grays, a line end after each row.
fn grays(canvas: &Canvas) -> String {
    let mut text = String::new();
    for y in 0..canvas.height {
        for x in 0..canvas.width {
            let escape = match canvas.get(x, y) {
                1 => "0;90;100m",
                2 => "0;37;47m",
                3 => "0;97;107m",
                _ => "0;30;40m",
            };
            text.push_str(&format!("\x1b[{escape} \x1b[0m"));
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_drawings_match_redis() {
        let mut rng = rand::thread_rng();
        // Redis 7.0.15's LOLWUT VERSION 5 1 1 1 and 5 3 1 1 (no randomness in the first two rows).
        assert_eq!(
            schotter_text(&[1, 1, 1], &mut rng),
            "⠋\n\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15\n"
        );
        assert!(schotter_text(&[3, 1, 1], &mut rng).starts_with("⠀⡤⡄\n⠀⠉⠁\n\n"));
        // Out-of-range arguments are clamped, as Redis clamps them.
        assert_eq!(
            schotter_text(&[-5, 0, 0], &mut rng),
            schotter_text(&[1, 1, 1], &mut rng)
        );
        let one = skyline_text(&[1, 1], &mut rng);
        assert!(one.starts_with("\x1b[0;97;107m \x1b[0m\nDedicated to the 8 bit game developers"));
    }

    #[test]
    fn drawings_have_redis_dimensions() {
        let mut rng = rand::thread_rng();
        let schotter = schotter_text(&[], &mut rng);
        let lines: Vec<&str> = schotter.lines().collect();
        // 66 columns; 8 squares of 16 pixels a row, 12 rows of them: 196 pixel rows, 49 text rows.
        assert_eq!(lines.len(), 49 + 2);
        assert!(lines[..49].iter().all(|line| line.chars().count() == 66));
        let skyline = skyline_text(&[], &mut rng);
        assert_eq!(skyline.lines().count(), 20 + 2);
        assert!(skyline
            .lines()
            .take(20)
            .all(|line| line.matches(" \x1b[0m").count() == 80));
    }
}
