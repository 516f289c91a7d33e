//! Recipes: a list of steps run as one transaction over the project
//! (docs/src/recipes.md). [`parse`] reads a recipe (TOML, YAML or JSON,
//! Goose's field names where they mean the same), [`run`] runs its steps
//! as stacked review runs and applies or keeps the result, [`report`]
//! says what happened.

pub mod parse;
pub mod report;
pub mod run;

pub use parse::{load, Recipe, RecipeError};
pub use report::RecipeReport;
