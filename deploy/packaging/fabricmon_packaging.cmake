# Install rules for the deployment files and the Debian packages (CPack, DEB generator).
# Included once, at the end of the top-level CMakeLists.txt.
#
#   cpack -G DEB --config build/CPackConfig.cmake -B OUTDIR
#     → fabricmon-agent_<version>-<release>_<arch>.deb, fabricmon-aggregator_…, fabricmon-cli_…
#
# Component agent      → package fabricmon-agent: fabricmon-agent, its unit, the sysusers entry,
#                        /etc/fabricmon/agent.textproto (conffile), the opt-in fabric-collector
#                        drop-in and umad udev rule (in /usr/share/fabricmon/agent/)
# Component aggregator → package fabricmon-aggregator: fabricmon-aggregator, its unit, the
#                        sysusers entry, /etc/fabricmon/aggregator.textproto (conffile), the
#                        Prometheus rules and scrape config, the Grafana dashboards and provisioning
# Component cli        → package fabricmon-cli: the fabricmon command-line tool
# Every package: /usr/share/doc/<package>/{copyright,changelog.Debian.gz,README.md}.
#
# Layout (prefix /usr in the packages; `cmake --install` uses its own prefix, default /usr/local,
# and the units, configs and provisioning files are rewritten for it at install time, see
# install_dirs.cmake and install_file.cmake; <sysconfdir> is GNUInstallDirs' for that prefix:
# /etc for /usr, /usr/local/etc for /usr/local):
#   <prefix>/bin/                                  binaries
#   <prefix>/lib/systemd/system/*.service          units
#   <prefix>/lib/sysusers.d/fabricmon-*.conf       user fabricmon
#   <sysconfdir>/fabricmon/{agent,aggregator}.textproto  configuration (conffiles in the packages;
#                                                  `cmake --install` never overwrites one)
#   <prefix>/share/doc/<package>/                  README.md, copyright, changelog.Debian.gz
#   <prefix>/share/fabricmon/agent/                fabric-collector drop-in, umad udev rule (opt-in)
#   <prefix>/share/fabricmon/prometheus/           rules.yml, scrape.yml
#   <prefix>/share/fabricmon/dashboards/grafana/   Grafana dashboards (JSON)
#   <prefix>/share/fabricmon/dashboards/provisioning/  Grafana provisioning (dashboards, datasource)
include_guard(GLOBAL)
include(GNUInstallDirs)

if(NOT SYSTEMD_FOUND)
  message(WARNING "fabricmon: libsystemd not found: the daemons will not send sd_notify "
                  "READY=1, but deploy/systemd/*.service are Type=notify. Install libsystemd-dev.")
endif()

set(FABRICMON_PACKAGE_CONTACT
    "fabricmon maintainers <fabricmon-maintainers@lists.example.org>" CACHE STRING
    "Maintainer field of the Debian packages (and of nothing else: the changelog keeps its own)")
# The Debian revision: deploy/packaging/debian/changelog's first entry must be
# <PROJECT_VERSION>-<FABRICMON_DEBIAN_RELEASE>.
set(FABRICMON_DEBIAN_RELEASE 2)

set(_fm_deploy "${PROJECT_SOURCE_DIR}/deploy")
set(_fm_stage "${CMAKE_CURRENT_BINARY_DIR}/fabricmon-install-stage")
set(_fm_components agent aggregator cli)

# --- changelog.Debian.gz: deploy/packaging/debian/changelog, version checked, gzip -9n ---
set(_fm_changelog "${_fm_deploy}/packaging/debian/changelog")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_fm_changelog}")
file(STRINGS "${_fm_changelog}" _fm_changelog_head LIMIT_COUNT 1)
set(_fm_deb_version "${PROJECT_VERSION}-${FABRICMON_DEBIAN_RELEASE}")
if(NOT _fm_changelog_head MATCHES "^fabricmon \\(([^)]+)\\) ")
  message(FATAL_ERROR "${_fm_changelog}: first line is not a changelog entry: ${_fm_changelog_head}")
elseif(NOT CMAKE_MATCH_1 STREQUAL _fm_deb_version)
  message(FATAL_ERROR "${_fm_changelog}: latest entry is ${CMAKE_MATCH_1}, but the packages are "
                      "${_fm_deb_version} (project version ${PROJECT_VERSION}, Debian release "
                      "${FABRICMON_DEBIAN_RELEASE}): add an entry")
endif()
find_program(FABRICMON_GZIP gzip REQUIRED)
set(_fm_changelog_gz "${CMAKE_CURRENT_BINARY_DIR}/debian/changelog.Debian.gz")
file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/debian")
# -n: no name or time stamp in the header (reproducible, as dh_compress does).
execute_process(COMMAND "${FABRICMON_GZIP}" -9n -c "${_fm_changelog}"
                OUTPUT_FILE "${_fm_changelog_gz}" RESULT_VARIABLE _fm_gzip_result)
if(NOT _fm_gzip_result EQUAL 0)
  message(FATAL_ERROR "gzip -9n ${_fm_changelog}: ${_fm_gzip_result}")
endif()

# The configure-time install dirs, for install_dirs.cmake (which resolves them at install time).
set(_fm_dirs_code "
    set(CMAKE_INSTALL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
    set(CMAKE_INSTALL_SYSCONFDIR \"${CMAKE_INSTALL_SYSCONFDIR}\")
    set(CMAKE_INSTALL_DATAROOTDIR \"${CMAKE_INSTALL_DATAROOTDIR}\")
    set(CMAKE_INSTALL_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
    include(\"${_fm_deploy}/packaging/install_dirs.cmake\")")

# fm_install_rewritten(<component> <source> <destination dir> <installed name> [KEEP_EXISTING])
# Installs a text file whose absolute paths follow the install prefix (install_file.cmake).
function(fm_install_rewritten component src dest name)
  set(keep "")
  if("KEEP_EXISTING" IN_LIST ARGN)
    set(keep "set(FM_KEEP_EXISTING ON)")
  endif()
  install(CODE "${_fm_dirs_code}
    set(FM_SRC \"${src}\")
    set(FM_DEST_DIR \"${dest}\")
    set(FM_NAME \"${name}\")
    set(FM_STAGE \"${_fm_stage}\")
    set(FM_KEEP_EXISTING OFF)
    ${keep}
    include(\"${_fm_deploy}/packaging/install_file.cmake\")"
    COMPONENT ${component})
endfunction()

# --- binaries (the daemons' own install() rules use the default component; these assign them
# to the packages) ---
install(TARGETS fabricmon-agent RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT agent)
install(TARGETS fabricmon-aggregator RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT aggregator)
install(TARGETS fabricmon RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)

foreach(_fm_component ${_fm_components})
  set(_fm_package "fabricmon-${_fm_component}")
  set(_fm_doc "${CMAKE_INSTALL_DATAROOTDIR}/doc/${_fm_package}")
  install(FILES "${PROJECT_SOURCE_DIR}/README.md" "${_fm_deploy}/packaging/debian/copyright"
                "${_fm_changelog_gz}"
          DESTINATION "${_fm_doc}" COMPONENT ${_fm_component})
endforeach()

foreach(_fm_component agent aggregator)
  set(_fm_package "fabricmon-${_fm_component}")
  fm_install_rewritten(${_fm_component} "${_fm_deploy}/systemd/${_fm_package}.service"
                       "lib/systemd/system" "${_fm_package}.service")
  install(FILES "${_fm_deploy}/systemd/fabricmon.sysusers.conf"
          DESTINATION "lib/sysusers.d" RENAME "${_fm_package}.conf" COMPONENT ${_fm_component})
  # <sysconfdir>/fabricmon/<component>.textproto: a conffile in the package (DEBIAN/conffiles
  # below); `cmake --install` installs it only where none exists yet.
  fm_install_rewritten(${_fm_component} "${_fm_deploy}/config/${_fm_component}.textproto"
                       "<sysconfdir>/fabricmon" "${_fm_component}.textproto" KEEP_EXISTING)
endforeach()

# Agent extras: opt-in access to /dev/infiniband/umad* for the MAD fabric collector (installed
# outside /usr/share/doc, which minimal images strip; the administrator copies them into place).
fm_install_rewritten(agent "${_fm_deploy}/systemd/fabricmon-agent.service.d/fabric-collector.conf"
                     "${CMAKE_INSTALL_DATAROOTDIR}/fabricmon/agent" "fabric-collector.conf")
install(FILES "${_fm_deploy}/systemd/90-fabricmon-umad.rules"
        DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/fabricmon/agent" COMPONENT agent)

# Aggregator extras: Prometheus rules and scrape config, Grafana dashboards (dashboards/grafana
# may be empty or absent; files added later are picked up at install time without re-running
# CMake) and the Grafana provisioning files, whose dashboard path follows the prefix.
install(FILES "${_fm_deploy}/prometheus/rules.yml" "${_fm_deploy}/prometheus/scrape.yml"
        DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/fabricmon/prometheus" COMPONENT aggregator)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/dashboards/grafana/"
        DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/fabricmon/dashboards/grafana"
        COMPONENT aggregator OPTIONAL FILES_MATCHING PATTERN "*.json")
foreach(_fm_yml dashboards.yml datasources.yml)
  fm_install_rewritten(aggregator "${PROJECT_SOURCE_DIR}/dashboards/provisioning/${_fm_yml}"
                       "${CMAKE_INSTALL_DATAROOTDIR}/fabricmon/dashboards/provisioning" ${_fm_yml})
endforeach()

# CLI extras: the Slurm prolog/epilog examples, their env file and the opt-in drain webhook
# (README "Jobs and Slurm"); examples to copy and adapt, so installed without the exec bit.
install(FILES "${_fm_deploy}/slurm/prolog-slurmctld.sh" "${_fm_deploy}/slurm/epilog-slurmctld.sh"
              "${_fm_deploy}/slurm/prolog.sh" "${_fm_deploy}/slurm/fabricmon-slurm.env.example"
              "${_fm_deploy}/slurm/alertmanager-drain-webhook.py"
        DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/fabricmon/slurm" COMPONENT cli)

# --- maintainer scripts and conffiles (the CLI package has neither) ---
foreach(_fm_component agent aggregator)
  set(FM_PACKAGE "fabricmon-${_fm_component}")
  set(FM_UNIT "fabricmon-${_fm_component}.service")
  set(FM_SYSUSERS "fabricmon-${_fm_component}.conf")
  set(FM_CONFIG "/etc/fabricmon/${_fm_component}.textproto")
  set(_fm_dir "${CMAKE_CURRENT_BINARY_DIR}/debian/${_fm_component}")
  set(_fm_control "")
  foreach(_fm_script postinst prerm postrm)
    configure_file("${_fm_deploy}/packaging/debian/${_fm_script}.in" "${_fm_dir}/${_fm_script}"
                   @ONLY)
    list(APPEND _fm_control "${_fm_dir}/${_fm_script}")
  endforeach()
  file(WRITE "${_fm_dir}/conffiles" "${FM_CONFIG}\n")
  list(APPEND _fm_control "${_fm_dir}/conffiles")
  string(TOUPPER "${_fm_component}" _fm_upper)
  set(CPACK_DEBIAN_${_fm_upper}_PACKAGE_CONTROL_EXTRA "${_fm_control}")
endforeach()

# --- CPack ---
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "fabricmon")
set(CPACK_PACKAGE_VENDOR "fabricmon")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "${FABRICMON_PACKAGE_CONTACT}")
set(CPACK_COMPONENTS_ALL ${_fm_components})  # not "Unspecified": the daemons' own install() rules
set(CPACK_DEB_COMPONENT_INSTALL ON)
# Absolute install paths (/etc/fabricmon) and prefix-dependent unit text need the DESTDIR
# mechanism with the final prefix: CMAKE_INSTALL_PREFIX is /usr while CPack installs.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX "/usr")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${FABRICMON_DEBIAN_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends from dpkg-shlibdeps (package dpkg-dev)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_AGENT_PACKAGE_NAME "fabricmon-agent")
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_NAME "fabricmon-aggregator")
set(CPACK_DEBIAN_CLI_PACKAGE_NAME "fabricmon-cli")
set(CPACK_DEBIAN_AGENT_PACKAGE_RECOMMENDS "fabricmon-cli")
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_RECOMMENDS "fabricmon-cli")
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_SUGGESTS "prometheus")
# /usr/bin/fabricmon was in fabricmon-aggregator 0.1.0-1.
set(CPACK_DEBIAN_CLI_PACKAGE_BREAKS "fabricmon-aggregator (<< 0.1.0-2)")
set(CPACK_DEBIAN_CLI_PACKAGE_REPLACES "fabricmon-aggregator (<< 0.1.0-2)")
# First line: the summary; then the extended description (CPACK_PACKAGE_DESCRIPTION_SUMMARY is
# left unset: CPack would prepend it to every package).
set(CPACK_DEBIAN_AGENT_DESCRIPTION "fabricmon node agent: fabric telemetry for GPU clusters
Reads InfiniBand/RoCE HCA counters (sysfs), ethtool PFC/ECN statistics,
host network and TCP counters and NVLink state (NVML) on every GPU node,
and streams them over gRPC to fabricmon-aggregator. Runs as user fabricmon
under a hardened systemd unit.")
set(CPACK_DEBIAN_AGGREGATOR_DESCRIPTION "fabricmon aggregator: fabric telemetry for GPU clusters
Receives the agents' streams, computes rates with each counter's width and
overflow semantics, detects link flaps, congestion trees and pause storms,
and exports all of it as Prometheus metrics. Ships Prometheus alert rules,
a scrape configuration and Grafana dashboards.")
set(CPACK_DEBIAN_CLI_DESCRIPTION "fabricmon command-line client: fabric findings and diagnosis
Queries a fabricmon-aggregator's Diagnostics service: nodes, active
findings (link flaps, congestion spreading, pause storms, TCP fallback,
NVLink faults) and the evidence behind each, from any host that can reach
the aggregator.")
include(CPack)
