"""What several built-in studies share, none of them a study: the pair studies' inputs (``inputs``), category
checks (``categories``), caveat lines (``caveats``), the length control (``length``), correlation tests with BH
(``correlation``) and text subsets (``subsets``). Built-in studies import these and the study API; no study
package imports another."""
